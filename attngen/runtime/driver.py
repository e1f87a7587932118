"""Stage 5: a cubin loaded through the CUDA driver (cuda.bindings.driver) and launched on a stream.

Kernels run in the device's primary context, the one PyTorch uses, so they share its streams and
memory. Nothing here imports torch.
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass

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


@dataclass
class LoadedFunction:
    name: str
    module: object
    function: object
    smem_bytes: int


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
    driver = _driver()
    arg_ptrs = (ctypes.c_void_p * 1)(ctypes.addressof(params))
    handle = _STREAMS.get(stream)
    if handle is None:
        handle = _STREAMS[stream] = driver.CUstream(stream)
    if dependent:
        config = _dependent_config(_Shape(grid, threads, fn.smem_bytes, stream), handle)
        result = driver.cuLaunchKernelEx(config, fn.function, ctypes.addressof(arg_ptrs), 0)
    else:
        result = driver.cuLaunchKernel(fn.function, grid[0], grid[1], grid[2], threads, 1, 1, fn.smem_bytes, handle,
                                       ctypes.addressof(arg_ptrs), 0)
    if result[0] != driver.CUresult.CUDA_SUCCESS:
        check_result(result, f"launching {fn.name}")


#: The driver's handle of each stream a launch used (made once: a launch happens on every call).
_STREAMS: dict[int, object] = {}


@dataclass(frozen=True)
class _Shape:
    """What a launch configuration holds besides its attributes (the function is passed beside it)."""

    grid: tuple[int, int, int]
    threads: int
    smem_bytes: int
    stream: int


def _dependent_config(shape: _Shape, handle: object) -> object:
    """The CUlaunchConfig of a programmatic dependent launch of `shape`, made once per shape (building one
    through the bindings costs ~6 us, more than the launch)."""
    config = _CONFIGS.get(shape)
    if config is None:
        driver = _driver()
        attr = driver.CUlaunchAttribute()
        attr.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        attr.value.programmaticStreamSerializationAllowed = 1
        config = driver.CUlaunchConfig()
        config.gridDimX, config.gridDimY, config.gridDimZ = shape.grid
        config.blockDimX, config.blockDimY, config.blockDimZ = shape.threads, 1, 1
        config.sharedMemBytes = shape.smem_bytes
        config.hStream = handle
        config.attrs = [attr]
        config.numAttrs = 1
        if len(_CONFIGS) >= _MAX_CONFIGS:
            _CONFIGS.clear()
        _CONFIGS[shape] = config
    return config


#: Launch configurations of dependent launches by shape; a server repeats a few shapes.
_CONFIGS: dict[_Shape, object] = {}
_MAX_CONFIGS = 1024
