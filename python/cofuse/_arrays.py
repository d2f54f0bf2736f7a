"""Arguments in, results out.

numpy arrays go to the compiled module as they are. torch CPU tensors go as their numpy views
(the same memory: nothing is copied), and results come back as tensors. A problem found here
(a tensor on a GPU, a dtype cofuse does not run) is passed on as text in the argument's place:
the compiled module agrees on it with the other ranks, so every rank raises cofuse.Error and
none is left waiting in a collective.
"""
import sys


def _torch():
    # torch is imported only by code that uses it; a numpy user never pays for it.
    return sys.modules.get("torch")


def to_buffer(x, name):
    """x as the compiled module reads it: a numpy array or other buffer, or a problem as text.
    (The compiled module checks shape, dtype, contiguity and writability of what it gets.)"""
    torch = _torch()
    if torch is not None and isinstance(x, torch.Tensor):
        if x.is_cpu and x.dtype in (torch.float32, torch.float64, torch.bfloat16):  # the fast path
            try:
                x = x.detach() if x.requires_grad else x
                # numpy has no bfloat16: its raw bits as an int16 view of the same memory.
                return x.view(torch.int16).numpy() if x.dtype is torch.bfloat16 else x.numpy()
            except (RuntimeError, TypeError) as e:  # sparse, a subclass without storage, ...
                return f"{name} ({type(x).__name__}, layout {x.layout}) has no numpy view: {e}"
        if not x.is_cpu:
            return (f"{name} is on {x.device}: cofuse's Python package runs CPU tensors only so far "
                    "(the CUDA backend is reachable from C++)")
        return f"{name} is {x.dtype}: cofuse's CPU ops take torch.float32, torch.float64 or torch.bfloat16"
    return x


def is_tensor(x):
    torch = _torch()
    return torch is not None and isinstance(x, torch.Tensor)


def wrap(result, like_torch, given):
    """A result the compiled module returned, as the caller gave its inputs: `given` itself when
    the caller passed the output, else a tensor (sharing the array's memory) for torch inputs."""
    if given is not None:
        return given
    if like_torch:
        tensor = _torch().from_numpy(result)
        # bf16 results come back as their raw bits (int16): the same memory, viewed as bfloat16.
        return tensor.view(_torch().bfloat16) if tensor.dtype is _torch().int16 else tensor
    return result


def dtype_name(dtype):
    """'float32' / 'float64' / 'bfloat16' from a string, a numpy dtype or a torch dtype."""
    if isinstance(dtype, str):
        return dtype
    torch = _torch()
    if torch is not None and isinstance(dtype, torch.dtype):
        return str(dtype).replace("torch.", "")
    try:
        import numpy
        return numpy.dtype(dtype).name
    except TypeError:
        return str(dtype)
