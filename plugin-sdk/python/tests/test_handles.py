"""The SDK's handle finalizer (kubewasm_sdk/_handles.py), on the machine's own CPython: run with
``pytest plugin-sdk/python/tests`` (host/tests/all/languages.rs does). It is loaded by path, as the
package itself needs componentize-py's generated bindings."""

import gc
import weakref

from sdk_module import load

handles = load("_handles")


class Wrapper:
    """Stands for a componentize-py resource wrapper: it holds its handle and its finalizer."""


def setup():
    dropped = []

    def drop(index, handle):
        dropped.append((index, handle))

    finalize = handles.finalizer_for(drop)
    wrapper = Wrapper()
    wrapper.handle = 42
    wrapper.finalizer = finalize(wrapper, drop, 7, 42)
    return dropped, drop, wrapper


def test_a_handle_goes_back_once_when_its_wrapper_dies():
    dropped, _, wrapper = setup()
    finalizer = wrapper.finalizer
    assert finalizer.alive
    del wrapper
    assert dropped == [(7, 42)]
    assert not finalizer.alive
    assert finalizer() is None
    assert dropped == [(7, 42)]


def test_calling_it_gives_the_handle_back_now_and_only_then():
    dropped, _, wrapper = setup()
    wrapper.finalizer()
    assert dropped == [(7, 42)]
    del wrapper
    assert dropped == [(7, 42)]


def test_detach_gives_what_componentize_py_unpacks_and_keeps_the_handle():
    dropped, drop, wrapper = setup()
    assert wrapper.finalizer.peek() == (wrapper, drop, (7, 42), {})
    # componentize-py's `__exit__`: `(_, func, args, _) = self.finalizer.detach()`.
    (obj, func, args, kwargs) = wrapper.finalizer.detach()
    assert (obj, func, args, kwargs) == (wrapper, drop, (7, 42), {})
    assert wrapper.finalizer.detach() is None
    assert wrapper.finalizer.peek() is None
    del wrapper, obj
    assert dropped == []


def test_a_wrapper_in_a_reference_cycle_gives_its_handle_back_when_collected():
    dropped, _, wrapper = setup()
    wrapper.itself = wrapper
    del wrapper
    assert dropped == []
    gc.collect()
    assert dropped == [(7, 42)]


def test_many_handles_go_back_and_nothing_stays_pending():
    dropped, drop, _ = setup()
    dropped.clear()
    finalize = handles.finalizer_for(drop)
    before = len(handles._pending)
    for i in range(10_000):
        w = Wrapper()
        w.finalizer = finalize(w, drop, 7, i)
    del w
    assert len(dropped) == 10_000
    assert len(handles._pending) == before


def test_other_finalizers_are_the_standard_one():
    _, drop, wrapper = setup()
    finalize = handles.finalizer_for(drop)

    def other():
        pass

    assert type(finalize(wrapper, other)) is weakref.finalize
    assert type(finalize(wrapper, drop, 1, handle=2)) is weakref.finalize


def test_outside_a_component_build_install_changes_nothing():
    standard = weakref.finalize
    assert handles.install() is False
    assert weakref.finalize is standard
