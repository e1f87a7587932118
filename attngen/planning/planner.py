"""Lower an AttentionSpec to a KernelPlan for one arch: the loop over the forward kernel families.

`plan` asks the registry which forward families serve the spec on the arch (`families.serving`),
resolves the pipeline (`choose`: a named pipeline goes to the family that runs it, or is refused with
that family's reason; `auto` takes the serving families in FAMILIES' order, each with its preferred
pipeline first) and lets the chosen family plan. The budget arithmetic and the cost models live in the
families (`attngen/families/sm80_fwd.py`, `sm90_fwd.py`); `ForwardFamily` is what they share: the
candidate screen (tile overrides, tilings the build found wanting), the ranking, and the messages of a
plan that cannot be made.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, cast

from .. import families
from ..errors import PlanError
from ..families.base import Direction, KernelFamily
from ..spec.model import Arch, AttentionSpec, PipelineKind
from . import search_space
from .archs import ArchInfo, arch_info
from .ir import Candidate, KernelPlan, Tiling

if TYPE_CHECKING:
    from ..toolchain.artifacts import KernelSource


def overrides(spec: AttentionSpec) -> dict[str, int]:
    """The spec's tile overrides that are set, e.g. {'block_m': 64}."""
    return spec.tiles.model_dump(exclude_none=True) if spec.tiles else {}


def override_mismatch(spec: AttentionSpec, tiling: Tiling) -> str | None:
    """None when `tiling` has every tile value the spec sets, else the first it lacks."""
    tiles = spec.tiles
    if tiles is None:
        return None
    for name in search_space.TILE_FIELDS:
        want = getattr(tiles, name)
        if want is not None and getattr(tiling, name) != want:
            return f"tiles.{name} is {want}"
    return None


def predicted(c: Candidate) -> float:
    assert c.cost is not None
    return c.cost.predicted_us


def rank_time(c: Candidate) -> float:
    """The time a candidate is ranked by: its cost's rank_us where the family keeps one, else its predicted time."""
    assert c.cost is not None
    return c.cost.predicted_us if c.cost.rank_us is None else c.cost.rank_us


class ForwardFamily(KernelFamily):
    """A forward family: the pipelines it runs, its search, budget and cost model (the hooks), and the
    plan every forward family makes from them (`plan`)."""

    direction: ClassVar[Direction] = Direction.forward
    #: The pipelines this family runs, in `auto`'s order when the family has no preference of its own.
    pipelines: ClassVar[tuple[PipelineKind, ...]]
    #: Its Jinja2 template (templates/).
    template: ClassVar[str]
    #: The heading of explain's family-specific candidate column (a yes/no per tiling).
    column: ClassVar[str]

    # ---- what it serves ------------------------------------------------------------------------
    def serves(self, spec: AttentionSpec, arch: Arch) -> str | None:
        kind = spec.pipeline.kind
        if kind is not PipelineKind.auto and kind not in self.pipelines:
            return f"the spec names pipeline '{kind.value}'; {self.name} runs {_or(self.pipelines)}"
        return self.trait_refusal(spec) or self.refuses(spec, arch)

    def refuses(self, spec: AttentionSpec, arch: Arch) -> str | None:
        """None when this family can build `spec` for `arch` (whatever its pipeline), else why not."""
        return None

    def auto_pipelines(self, spec: AttentionSpec) -> list[PipelineKind]:
        """The pipelines `auto` may use, preferred first."""
        return list(self.pipelines)

    def auto_note(self, spec: AttentionSpec, kind: PipelineKind) -> str:
        """Why `auto` runs `kind` in this family ('' when it is the family's only pipeline)."""
        return ""

    # ---- its search, budget and cost model -----------------------------------------------------
    @abstractmethod
    def enumerate_tilings(self, spec: AttentionSpec, kind: PipelineKind) -> Sequence[Tiling]:
        """The tilings `kind` tries for `spec` (its search space with the spec's stages)."""

    @abstractmethod
    def evaluate(self, spec: AttentionSpec, info: ArchInfo, tiling: Tiling, kind: PipelineKind) -> Candidate:
        """One tiling against the budget: fits with its cost, or rejected with the arithmetic."""

    @abstractmethod
    def assemble(self, spec: AttentionSpec, arch: Arch, kind: PipelineKind, best: Candidate, reason: str,
                 candidates: tuple[Candidate, ...]) -> KernelPlan:
        """The KernelPlan of the chosen candidate."""

    @abstractmethod
    def owns(self, tiling: Tiling) -> bool:
        """Whether `tiling` is of this family's own tiling type (plan_with's check)."""

    @abstractmethod
    def describe(self, tiling: Tiling) -> str:
        """A tiling as the reasons name it."""

    @abstractmethod
    def column_value(self, tiling: Tiling) -> bool:
        """explain's family-specific column for one tiling."""

    def explain_lines(self, plan: KernelPlan) -> list[str]:
        """Lines explain prints about the plan beside the table (the register split, say)."""
        return []

    def space(self, kind: PipelineKind) -> search_space.Space:
        return search_space.SPACES[kind.value]

    def rank_key(self, spec: AttentionSpec, c: Candidate) -> tuple[Any, ...]:
        """The lowest predicted time first; ties go to fewer bytes of shared memory, then fewer registers."""
        return (0, rank_time(c), c.smem_bytes, c.regs_estimate)

    def choice_reason(self, spec: AttentionSpec, kind: PipelineKind, best: Candidate,
                      fitting: list[Candidate]) -> str:
        return lowest_reason(best, fitting)

    def evaluate_all(self, spec: AttentionSpec, info: ArchInfo, kind: PipelineKind) -> list[Candidate]:
        return [self.evaluate(spec, info, t, kind) for t in self.enumerate_tilings(spec, kind)]

    def plan(self, spec: AttentionSpec, info: ArchInfo, exclude: Mapping[Any, str] | None = None,
             pipeline: PipelineKind | None = None) -> KernelPlan:
        """The plan of `spec` with `pipeline` (default: the spec's, for `auto` this family's preferred)."""
        kind = pipeline or spec.pipeline.kind
        if kind is PipelineKind.auto:
            kind = self.auto_pipelines(spec)[0]
        candidates: list[Candidate] = []
        for cand in self.evaluate_all(spec, info, kind):
            mismatch = override_mismatch(spec, cand.tiling)
            if mismatch and cand.fits:
                cand = cand.model_copy(update={"fits": False, "reason": f"excluded by the spec: {mismatch}"})
            elif exclude and cand.tiling in exclude and cand.fits:
                cand = cand.model_copy(update={"fits": False, "reason": exclude[cand.tiling]})
            candidates.append(cand)
        fitting = sorted((c for c in candidates if c.fits), key=lambda c: self.rank_key(spec, c))
        if not fitting:
            raise PlanError(_no_fit_message(spec, info.arch, kind, candidates))
        best = fitting[0]
        return self.assemble(spec, info.arch, kind, best, self.choice_reason(spec, kind, best, fitting),
                             tuple(candidates))

    # ---- render and launch ---------------------------------------------------------------------
    @abstractmethod
    def context(self, plan: KernelPlan) -> dict[str, object]:
        """Every value the family's template reads."""

    @abstractmethod
    def plan_line(self, plan: KernelPlan) -> str:
        """The plan as the rendered source's header states it."""

    def render(self, plan: KernelPlan) -> KernelSource:
        from ..codegen.renderer import render_source

        return render_source(plan, self.template, self.context(plan), (plan.kernel_name,))

    @abstractmethod
    def prepare(self, plan: KernelPlan, fn: Any, call: Any) -> Any:
        """The family's launch for calls like `call` (a runtime.forward.FwdCall), with everything that depends only
        on its geometry (runtime.prepared.CallGeometry) done: an object whose `run(call, stream)` launches the
        loaded kernel `fn` for a call of that geometry on `stream`."""


def lowest_reason(best: Candidate, fitting: list[Candidate]) -> str:
    """'lowest predicted time ... us at seqlen ... (the model's terms); next best ... us'."""
    cost = best.cost
    assert cost is not None
    others = [c for c in fitting if c is not best]
    runner = f"; next best {predicted(min(others, key=rank_time))} us" if others else ""
    return f"lowest predicted time {cost.predicted_us} us at seqlen {cost.ref_seqlen} ({cost_terms(best)}){runner}"


def cost_terms(c: Candidate) -> str:
    assert c.cost is not None
    return (f"{c.cost.blocks_per_sm} blocks/SM, HBM {c.cost.t_hbm_us} us, MMA {c.cost.t_mma_us} us, "
            f"smem {c.cost.t_smem_us} us")


# ---- choosing a family ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Choice:
    """The family and pipeline a plan of one spec on one arch uses, and why (explain shows it)."""

    family: ForwardFamily
    pipeline: PipelineKind
    why: str
    #: Every other forward family: why it was not chosen.
    others: dict[str, str] = field(default_factory=dict)


def forward_families() -> list[ForwardFamily]:
    """The forward families, in FAMILIES' order."""
    return [cast(ForwardFamily, f) for f in families.registry() if f.direction is Direction.forward]


def forward_family(name: str) -> ForwardFamily:
    """The forward family `name` (a plan's `family`)."""
    family = families.get(name)
    assert isinstance(family, ForwardFamily), f"{name} is not a forward family"
    return family


def family_of(kind: PipelineKind) -> ForwardFamily:
    """The family that runs pipeline `kind`."""
    return next(f for f in forward_families() if kind in f.pipelines)


def choose(spec: AttentionSpec, arch: Arch | str) -> Choice:
    """The family and pipeline that plan `spec` on `arch`; PlanError when the named pipeline's family refuses.

    `auto`: the pipelines of the serving families in FAMILIES' order (each family's preferred first);
    the first, or with tile overrides the first whose search space holds them and that fits them, else
    the first that holds them (its PlanError then gives the budget).
    """
    arch = Arch(arch)
    found, refused = families.serving(spec, arch, Direction.forward)
    serving = [cast(ForwardFamily, f) for f in found]
    kind = spec.pipeline.kind
    if kind is not PipelineKind.auto:
        if not serving:
            runner = family_of(kind)
            raise PlanError(f"spec '{spec.name}' asks for pipeline '{kind.value}', but {refused[runner.name]}. "
                            f"Remedy: use pipeline {_alternatives(spec, arch)} for this spec or arch")
        return Choice(serving[0], kind, f"the spec names pipeline '{kind.value}'", refused)
    pairs = [(f, k) for f in serving for k in f.auto_pipelines(spec)]
    if not pairs:
        raise PlanError(f"no forward kernel family serves spec '{spec.name}' on {arch.value}: "
                        + "; ".join(f"{name}: {why}" for name, why in refused.items()))
    tiles = overrides(spec)
    chosen = pairs[0]
    why = "the first family in FAMILIES' order (the faster path first) that serves the spec"
    held: list[tuple[ForwardFamily, PipelineKind]] = []
    if tiles and len(pairs) > 1:
        info = arch_info(arch)
        held = [(f, k) for f, k in pairs if f.space(k).holds(tiles)]
        fits = (p for p in held if any(c.fits and override_mismatch(spec, c.tiling) is None
                                       for c in p[0].evaluate_all(spec, info, p[1])))
        chosen = next(fits, held[0] if held else pairs[0])
        why = (f"the first family in FAMILIES' order (the faster path first) that serves the spec and tries "
               f"its tiles {search_space.show_tiles(tiles)}")
    family, kind = chosen
    note = family.auto_note(spec, kind)
    others = dict(refused)
    rank = serving.index(family)
    for other in serving:
        if other is family:
            continue
        if serving.index(other) > rank:
            others[other.name] = f"serves the spec, but {family.name} comes before it in FAMILIES' order"
        elif any(f is other for f, _ in held):
            others[other.name] = (f"no tiling of its with tiles {search_space.show_tiles(tiles)} fits the "
                                  f"{arch.value} budget")
        else:
            others[other.name] = f"its pipelines never try tiles {search_space.show_tiles(tiles)}"
    return Choice(family, kind, f"pipeline auto: {why}" + (f"; {note}" if note else ""), others)


def _alternatives(spec: AttentionSpec, arch: Arch) -> str:
    """"'auto' or 'multistage'": the pipelines the spec could name on `arch` instead."""
    auto = spec.model_copy(update={"pipeline": spec.pipeline.model_copy(update={"kind": PipelineKind.auto})})
    found, _ = families.serving(auto, arch, Direction.forward)
    names = ["auto", *(k.value for f in found for k in cast(ForwardFamily, f).pipelines)]
    return _or([f"'{n}'" for n in names])


def _or(items: Any) -> str:
    words = [getattr(i, "value", i) for i in items]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + f" or {words[-1]}"


def resolve_pipeline(spec: AttentionSpec, arch: Arch) -> PipelineKind:
    """The strategy a plan uses: the spec's, or for `auto` the best one `arch` offers for it."""
    return choose(spec, arch).pipeline


def plan(spec: AttentionSpec, arch: Arch | str, exclude: Mapping[Tiling, str] | None = None) -> KernelPlan:
    """The KernelPlan of `spec` on `arch`; PlanError when no tiling fits the budget.

    `exclude` maps tilings already found wanting (by the build's ptxas check) to the reason.
    """
    arch = Arch(arch)
    choice = choose(spec, arch)
    return choice.family.plan(spec, arch_info(arch), exclude, pipeline=choice.pipeline)


def plan_with(spec: AttentionSpec, arch: Arch | str, tiling: Tiling,
              pipeline: PipelineKind | None = None) -> KernelPlan:
    """The plan for one given tiling (sweeps, ablations and tests); PlanError when it does not fit.
    `pipeline` overrides the spec's strategy."""
    arch = Arch(arch)
    if pipeline is not None:
        spec = spec.model_copy(update={"pipeline": spec.pipeline.model_copy(update={"kind": pipeline})})
    choice = choose(spec, arch)
    family, kind = choice.family, choice.pipeline
    if not family.owns(tiling):
        raise PlanError(f"tiling {tiling.model_dump()} is not a {kind.value} tiling")
    cand = family.evaluate(spec, arch_info(arch), tiling, kind)
    if not cand.fits:
        raise PlanError(f"tiling {tiling.model_dump()} does not fit {arch.value}: {cand.reason}")
    return family.assemble(spec, arch, kind, cand, "tiling given explicitly", (cand,))


def considered(kernel_plan: KernelPlan) -> list[tuple[str, str]]:
    """Every forward family with what became of it for this plan's spec and arch (explain's list): the
    chosen one and why, each other's refusal, or for one that serves the spec why it lost, with its own
    pick and that pick's predicted time."""
    spec, arch = kernel_plan.spec, kernel_plan.arch
    choice = choose(spec, arch)
    out = []
    for family in forward_families():
        if family.name == kernel_plan.family:
            out.append((family.name, f"chosen ({family.path}): {choice.why}"))
            continue
        why = choice.others.get(family.name, "not considered")
        if family.serves(spec, arch) is None:
            try:
                own = family.plan(spec, arch_info(arch))
                why += (f"; its own pick [{family.describe(own.tiling)}] predicts {own.cost.predicted_us} us "
                        f"({family.name}'s cost model; {kernel_plan.family}'s plan {kernel_plan.cost.predicted_us} us)")
            except PlanError as exc:
                why += f"; it has no plan: {str(exc).splitlines()[0]}"
        out.append((family.name, why))
    return out


# ---- a plan that cannot be made ------------------------------------------------------------------


def _no_fit_message(spec: AttentionSpec, arch: Arch, kind: PipelineKind, candidates: list[Candidate]) -> str:
    tiles = overrides(spec)
    outside = search_space.outside(tiles, [search_space.SPACES[kind.value]]) if tiles else None
    if outside is not None:
        return _outside_space_message(spec, arch, kind, outside)
    return _budget_message(spec, arch, candidates)


def _outside_space_message(spec: AttentionSpec, arch: Arch, kind: PipelineKind, outside: str) -> str:
    """Tile overrides the pipeline never tries: what it tries, and which pipelines would take them."""
    tiles = overrides(spec)
    elsewhere = [s for s in search_space.SPACES.values() if s.pipeline != kind.value and s.holds(tiles)]
    remedy = f"Remedy: pick tiles the {kind.value} pipeline tries or drop the spec's 'tiles' overrides"
    if elsewhere:
        names = " or ".join(f"'{s.pipeline}'{search_space.only_note(s)}" for s in elsewhere)
        remedy = f"{remedy}; or use pipeline {names}, which tries these tiles"
    return (f"spec '{spec.name}' plans with the {kind.value} pipeline on {arch.value}, whose search space does not "
            f"hold its tiles: {outside}.\n{remedy}.")


def _budget_message(spec: AttentionSpec, arch: Arch, candidates: list[Candidate]) -> str:
    """No candidate the spec allows fits: the budget, each rejection's arithmetic, and a remedy."""
    # With tile overrides, only the candidates the spec asked for explain the failure.
    relevant = [c for c in candidates if override_mismatch(spec, c.tiling) is None] or candidates
    smallest = min(relevant, key=lambda c: c.smem_bytes)
    lines = [f"no tiling of spec '{spec.name}' fits the {arch.value} budget "
             f"({arch_info(arch).smem_per_block} B shared memory per block, 255 registers per thread)."]
    reasons = list(dict.fromkeys(c.reason for c in relevant))
    lines += [f"  rejected: {r}" for r in reasons[:6]]
    if len(reasons) > 6:
        lines.append(f"  ... and {len(reasons) - 6} more")
    lines.append(f"smallest candidate needs {smallest.smem_bytes} B. Remedy: drop or relax the spec's "
                 f"'tiles' overrides, use fewer pipeline stages, or target an arch with more shared memory.")
    return "\n".join(lines)
