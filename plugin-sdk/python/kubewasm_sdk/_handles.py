"""A lighter finalizer for componentize-py's object handles, installed by importing kubewasm_sdk.

componentize-py ties every handle a plugin receives (the objects an event lends, each object a
query returns) to a ``weakref.finalize`` that gives the handle back to the host when its Python
wrapper goes away. In CPython compiled to WebAssembly, that class's constructor and registry
cost about a microsecond per handle, and a short ``handle`` takes several: about a tenth of the
owner-chain example's time (docs/guides/python.md, "What a call costs").

``install`` puts a function in place of ``weakref.finalize`` that gives componentize-py's own
finalizers (those calling ``componentize_py_runtime.drop_resource``) a lighter one, built in C,
with all that componentize-py 0.25 uses of it: the handle goes back once, when the wrapper
dies (in a reference cycle too, once the collector runs), unless ``detach()`` took it first
(``with obj:``, a borrow returned at the end of a call). Every other caller gets the standard
``weakref.finalize``. componentize-py reads ``weakref.finalize`` once, after the app's modules
are imported, so importing kubewasm_sdk anywhere in the app is enough.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable, Optional, Tuple

_standard = weakref.finalize

# Finalizers neither run nor detached, by id. Like weakref.finalize's registry, this keeps each
# one alive while its wrapper is: the collector does not run the callback of a weak reference
# that is garbage itself, as one held only by a wrapper in a reference cycle would be.
_pending: dict = {}


class HandleFinalizer(weakref.ref):
    """Gives one handle back when its wrapper dies, unless detached first."""

    __slots__ = ("func", "args")

    def __call__(self) -> Any:
        """Gives the handle back now if it was not yet (as calling a ``weakref.finalize`` does)."""
        if _pending.pop(id(self), None) is not None:
            return self.func(*self.args)
        return None

    def detach(self) -> Optional[Tuple[Any, Callable, tuple, dict]]:
        """Keeps the handle from being given back: ``(wrapper, func, args, kwargs)``, or None when
        it was given back or detached already."""
        wrapper = weakref.ref.__call__(self)
        if wrapper is not None and _pending.pop(id(self), None) is not None:
            return (wrapper, self.func, self.args, {})
        return None

    def peek(self) -> Optional[Tuple[Any, Callable, tuple, dict]]:
        """``(wrapper, func, args, kwargs)`` while the handle is still to be given back, else None."""
        wrapper = weakref.ref.__call__(self)
        if wrapper is not None and id(self) in _pending:
            return (wrapper, self.func, self.args, {})
        return None

    @property
    def alive(self) -> bool:
        """True while the handle is still to be given back."""
        return id(self) in _pending


def _died(finalizer: HandleFinalizer) -> None:
    if _pending.pop(id(finalizer), None) is not None:
        finalizer.func(*finalizer.args)


def finalizer_for(drop: Callable) -> Callable:
    """A stand-in for ``weakref.finalize``: a ``HandleFinalizer`` for calls of ``drop``, the
    standard finalizer for anything else."""

    def finalize(obj: Any, func: Callable, /, *args: Any, **kwargs: Any) -> Any:
        if func is not drop or kwargs:
            return _standard(obj, func, *args, **kwargs)
        finalizer = HandleFinalizer(obj, _died)
        finalizer.func = func
        finalizer.args = args
        _pending[id(finalizer)] = finalizer
        return finalizer

    return finalize


def install() -> bool:
    """Puts the stand-in in place for componentize-py's handles; False (nothing done) outside a
    componentize-py build, where there is no ``componentize_py_runtime``."""
    try:
        from componentize_py_runtime import drop_resource  # type: ignore[import-not-found]
    except ImportError:
        return False
    weakref.finalize = finalizer_for(drop_resource)
    return True
