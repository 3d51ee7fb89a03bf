"""Shared test setup: every test gets a fresh compile cache dir and fresh Dynamo state."""
import os

import pytest
import torch


@pytest.fixture(autouse=True)
def _fresh_state(tmp_path, monkeypatch):
    monkeypatch.setenv("NEURON_INDUCTOR_CACHE_DIR", str(tmp_path / "neuron-cache"))
    from neuron_inductor import config
    config.reset()
    try:
        from neuron_inductor.cache import clear_memory
        clear_memory()
    except ImportError:  # pragma: no cover
        pass
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
    config.reset()


# --------------------------------------------------------------------------------------------------
# NKI conformance gate: every kernel module generated anywhere in the session is checked against the
# instruction specification at session end (neuron_inductor.codegen.conform, the check every compile
# runs), and every kernel the IR verifier refused for a specification rule is reported; any finding
# fails the session, listed by rule with the kernels and tests involved. Tests that build
# non-conforming kernels on purpose carry ``@pytest.mark.nonconforming``.

_GENERATED: dict[int, tuple[str, str]] = {}
_IR_REFUSED: list[tuple[str, str, str, str]] = []
_CURRENT: list = [None]


def _collecting() -> bool:
    item = _CURRENT[0]
    return item is None or item.get_closest_marker("nonconforming") is None


def _test_id() -> str:
    return _CURRENT[0].nodeid if _CURRENT[0] is not None else "<collection>"


def pytest_configure(config):
    config.addinivalue_line("markers", "nonconforming: the test builds non-conforming NKI kernels on "
                                       "purpose; they are left out of the session conformance gate")
    import neuron_inductor.codegen as cg
    import neuron_inductor.codegen.kernel as kmod
    import neuron_inductor.ir.verify as vmod
    from neuron_inductor.spec import RULES

    gen, verify = kmod.generate_kernels_module, vmod.verify_kernel

    def generate_kernels_module(*args, **kwargs):
        src = gen(*args, **kwargs)
        if _collecting():
            _GENERATED.setdefault(hash(src), (src, _test_id()))
        return src

    def verify_kernel(kernel, target):
        try:
            return verify(kernel, target)
        except vmod.IRVerificationError as e:
            if _collecting():
                _IR_REFUSED.extend((kernel.name, rule, detail, _test_id())
                                   for rule, detail, _ in e.findings if rule in RULES)
            raise

    kmod.generate_kernels_module = cg.generate_kernels_module = generate_kernels_module
    vmod.verify_kernel = verify_kernel


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _CURRENT[0] = item
    yield
    _CURRENT[0] = None


def conformance_report() -> dict[str, list[str]]:
    """Findings of the session so far: rule -> ["kernel (test): detail", ...]."""
    from neuron_inductor.codegen.conform import conformance_findings

    by_rule: dict[str, list[str]] = {}
    for src, test in _GENERATED.values():
        for f in conformance_findings(src):
            by_rule.setdefault(f.rule, []).append(f"{f.kernel}:{f.line} ({test}): {f.detail}")
    for kernel, rule, detail, test in _IR_REFUSED:
        by_rule.setdefault(rule, []).append(f"{kernel} [refused by the IR verifier] ({test}): {detail}")
    return by_rule


def pytest_sessionfinish(session, exitstatus):
    if not _GENERATED and not _IR_REFUSED:
        return
    report = conformance_report()
    tr = session.config.pluginmanager.get_plugin("terminalreporter")
    n = sum(len(v) for v in report.values())
    lines = [f"NKI conformance gate: {len(_GENERATED)} generated kernel module(s), {n} finding(s)"]
    for rule, items in sorted(report.items()):
        kernels = sorted({x.split(":", 1)[0].split(" ", 1)[0] for x in items})
        lines.append(f"  [{rule}] {len(items)} finding(s) in kernel(s) {', '.join(kernels[:12])}"
                     + (" ..." if len(kernels) > 12 else ""))
        lines += [f"      {x}" for x in items[:3]]
    if tr is not None:
        tr.write_sep("=", "NKI conformance", red=bool(report), green=not report)
        for line in lines:
            tr.write_line(line)
    if report and session.exitstatus == 0:
        session.exitstatus = 1
