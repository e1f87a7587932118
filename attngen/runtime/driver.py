"""Stage 5: a cubin loaded through the CUDA driver (cuda.bindings.driver) and launched on a stream.

Kernels run in the device's primary context, the one PyTorch uses, so they share its streams and
memory. Nothing here imports torch.
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass, field
from functools import cache

from ..errors import LaunchError

_LOCK = threading.Lock()


def _driver():  # type: ignore[no-untyped-def]
    from cuda.bindings import driver

    return driver


def check_result(result: tuple, what: str) -> tuple:  # type: ignore[type-arg]
    err = result[0]
    driver = _driver()
    if err != driver.CUresult.CUDA_SUCCESS:
        _, name = driver.cuGetErrorName(err)
        _, text = driver.cuGetErrorString(err)
        name = name.decode() if isinstance(name, bytes) else name
        text = text.decode() if isinstance(text, bytes) else text
        raise LaunchError(f"{what} failed: {name} ({text})")
    return result[1:]


def ensure_context(device_index: int) -> None:
    """Make the device's primary context current on this thread (PyTorch's context)."""
    driver = _driver()
    check_result(driver.cuInit(0), "cuInit")
    (current,) = check_result(driver.cuCtxGetCurrent(), "cuCtxGetCurrent")
    (device,) = check_result(driver.cuDeviceGet(device_index), "cuDeviceGet")
    if current is not None and int(current) != 0:
        (cur_dev,) = check_result(driver.cuCtxGetDevice(), "cuCtxGetDevice")
        if int(cur_dev) == int(device):
            return
    (ctx,) = check_result(driver.cuDevicePrimaryCtxRetain(device), "cuDevicePrimaryCtxRetain")
    check_result(driver.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")


def memory_interface(device_index: int) -> tuple[int, int]:
    """Device `device_index`'s memory clock in kHz and its memory bus width in bits (cuDeviceGetAttribute)."""
    driver = _driver()
    check_result(driver.cuInit(0), "cuInit")
    (device,) = check_result(driver.cuDeviceGet(device_index), "cuDeviceGet")
    attribute = driver.CUdevice_attribute
    (clock_khz,) = check_result(driver.cuDeviceGetAttribute(attribute.CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, device),
                                "cuDeviceGetAttribute(MEMORY_CLOCK_RATE)")
    (bus_bits,) = check_result(driver.cuDeviceGetAttribute(attribute.CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH,
                                                           device), "cuDeviceGetAttribute(GLOBAL_MEMORY_BUS_WIDTH)")
    return int(clock_khz), int(bus_bits)


@dataclass
class LoadedFunction:
    name: str
    module: object
    function: object
    smem_bytes: int
    #: Other entry points of the same module, loaded on first use (sibling()).
    siblings: dict[str, LoadedFunction] = field(default_factory=dict)

    def sibling(self, name: str) -> LoadedFunction:
        """Entry point `name` of this function's module (static shared memory only), loaded once."""
        fn = self.siblings.get(name)
        if fn is None:
            with _LOCK:
                (function,) = check_result(_driver().cuModuleGetFunction(self.module, name.encode()),
                                           f"finding kernel {name}")
            fn = self.siblings[name] = LoadedFunction(name=name, module=self.module, function=function, smem_bytes=0)
        return fn

    @property
    def handle(self) -> int:
        """The CUfunction's address, as the driver library takes it."""
        return int(self.function)  # type: ignore[call-overload]


def load_function(cubin: bytes, name: str, smem_bytes: int, device_index: int) -> LoadedFunction:
    """Load `name` from `cubin` on the device and allow it `smem_bytes` of dynamic shared memory."""
    driver = _driver()
    with _LOCK:
        ensure_context(device_index)
        (module,) = check_result(driver.cuModuleLoadData(cubin), f"loading the cubin of {name}")
        (function,) = check_result(driver.cuModuleGetFunction(module, name.encode()), f"finding kernel {name}")
        attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        check_result(driver.cuFuncSetAttribute(function, attr, smem_bytes),
               f"raising {name}'s dynamic shared memory to {smem_bytes} B")
    return LoadedFunction(name=name, module=module, function=function, smem_bytes=smem_bytes)


def launch(fn: LoadedFunction, grid: tuple[int, int, int], threads: int, stream: int,
           params: ctypes.Structure, *, dependent: bool = False) -> None:
    """Launch with one by-value struct parameter on the given CUstream handle. `dependent`: a programmatic
    dependent launch (sm90+): the kernel may start while the one before it on the stream runs, and waits for
    that one's results itself (griddepcontrol.wait) before reading them."""
    PreparedLaunch(fn, grid, threads, dependent)(stream, params)


class PreparedLaunch:
    """One entry point's launch with its grid, block and shared memory fixed: a call gives the stream and the
    parameter block. The call goes to the driver library through ctypes (cuda.bindings' wrappers convert every
    argument and cost ~17 us a launch, more than a decode kernel over a short cache takes), with the launch
    configuration built once."""

    def __init__(self, fn: LoadedFunction, grid: tuple[int, int, int], threads: int, dependent: bool = False):
        self.fn = fn
        self.grid = grid
        self.threads = threads
        self.dependent = dependent
        self._handle = fn.handle
        self._config = _LaunchConfig(grid[0], grid[1], grid[2], threads, 1, 1, fn.smem_bytes, None,
                                     ctypes.pointer(_SERIALIZATION_ALLOWED), 1) if dependent else None

    def __call__(self, stream: int, params: ctypes.Structure) -> None:
        lib = _libcuda()
        arg_ptrs = (ctypes.c_void_p * 1)(ctypes.addressof(params))
        if self._config is not None:
            config = _LaunchConfig.from_buffer_copy(self._config)   # a copy per call: threads share this launch
            config.hStream = stream
            err = lib.cuLaunchKernelEx(ctypes.byref(config), self._handle, arg_ptrs, None)
        else:
            g = self.grid
            err = lib.cuLaunchKernel(self._handle, g[0], g[1], g[2], self.threads, 1, 1, self.fn.smem_bytes, stream,
                                     arg_ptrs, None)
        if err:
            driver = _driver()
            check_result((driver.CUresult(err),), f"launching {self.fn.name}")


class _LaunchAttribute(ctypes.Structure):
    """CUlaunchAttribute: an id, padding to 8 bytes, a 64-byte value union."""

    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_ubyte * 4), ("value", ctypes.c_int * 16)]


class _LaunchConfig(ctypes.Structure):
    """CUlaunchConfig."""

    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(_LaunchAttribute)), ("numAttrs", ctypes.c_uint)]


#: CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION (6) with programmaticStreamSerializationAllowed = 1.
_SERIALIZATION_ALLOWED = _LaunchAttribute(6, (ctypes.c_ubyte * 4)(), (ctypes.c_int * 16)(1))


@cache
def _libcuda() -> ctypes.CDLL:
    """The driver library (the one cuda.bindings loads), with the launch entry points' signatures."""
    lib = ctypes.CDLL("libcuda.so.1")
    ptr, uint = ctypes.c_void_p, ctypes.c_uint
    lib.cuLaunchKernel.argtypes = [ptr, uint, uint, uint, uint, uint, uint, uint, ptr, ptr, ptr]
    lib.cuLaunchKernel.restype = ctypes.c_int
    lib.cuLaunchKernelEx.argtypes = [ctypes.POINTER(_LaunchConfig), ptr, ptr, ptr]
    lib.cuLaunchKernelEx.restype = ctypes.c_int
    return lib
