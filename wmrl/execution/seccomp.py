"""A seccomp filter that forbids new user namespaces, for bubblewrap's ``--seccomp`` option.

The sandbox's user-namespace mode forbids them with bubblewrap's ``--disable-userns``. That option needs
``--unshare-user``, which the mode of a root driver cannot use: there the program runs under a real uid of its own
(so that ``RLIMIT_NPROC`` counts only its execution), and a user namespace made by a root bubblewrap would map the
program to root. That mode installs this filter instead: ``unshare`` and ``clone`` with ``CLONE_NEWUSER`` fail
with ``EPERM``, and ``clone3`` (whose flags a filter cannot read) with ``ENOSYS``, so that the C library falls
back to ``clone``; a system call of another ABI (32-bit or x32) fails with ``ENOSYS``. Everything else is
allowed.

The filter is a classic BPF program (``struct sock_filter`` array, native byte order), built for x86-64 and
AArch64; :func:`userns_filter` returns None elsewhere.
"""
from __future__ import annotations

import errno
import platform
import struct

#: Linux ``CLONE_NEWUSER``.
CLONE_NEWUSER = 0x10000000

# BPF opcodes (linux/filter.h, linux/bpf_common.h) and seccomp return values (linux/seccomp.h).
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06
_ALLOW = 0x7FFF0000
_ERRNO = 0x00050000

# seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6] (the low word of args[0] at 16 on
# little-endian machines).
_NR, _ARCH, _ARG0_LO = 0, 4, 16

#: machine -> (AUDIT_ARCH_*, {syscall: number}, first number of another ABI on the same arch or None)
_ARCHES = {
    "x86_64": (0xC000003E, {"unshare": 272, "clone": 56, "clone3": 435}, 0x40000000),
    "aarch64": (0xC00000B7, {"unshare": 97, "clone": 220, "clone3": 435}, None),
}


def userns_filter(machine: str | None = None) -> bytes | None:
    """The filter's bytes for ``machine`` (``platform.machine()`` by default), or None where it is not built."""
    machine = machine or platform.machine()
    arch = _ARCHES.get({"amd64": "x86_64", "arm64": "aarch64"}.get(machine.lower(), machine.lower()))
    if arch is None:
        return None
    audit, nrs, foreign_abi = arch
    eperm, enosys = _ERRNO | errno.EPERM, _ERRNO | errno.ENOSYS
    # (code, jt, jf, k); jumps count instructions after the next one. Layout:
    #  0 ld arch; 1 jeq audit ? 2 : 9(ret enosys)
    #  2 ld nr; 3 jge foreign ? 9 : 4 (or a no-op); 4 jeq clone3 ? 9 : 5
    #  5 jeq unshare ? 7 : 6; 6 jeq clone ? 7 : 10(allow)
    #  7 ld arg0; 8 jset NEWUSER ? 11(eperm) : 10(allow)
    #  9 ret enosys; 10 ret allow; 11 ret eperm
    prog = [
        (_LD_W_ABS, 0, 0, _ARCH),
        (_JEQ_K, 0, 7, audit),
        (_LD_W_ABS, 0, 0, _NR),
        (_JGE_K, 5, 0, foreign_abi) if foreign_abi is not None else (_JEQ_K, 0, 0, 0),
        (_JEQ_K, 4, 0, nrs["clone3"]),
        (_JEQ_K, 1, 0, nrs["unshare"]),
        (_JEQ_K, 0, 3, nrs["clone"]),
        (_LD_W_ABS, 0, 0, _ARG0_LO),
        (_JSET_K, 2, 1, CLONE_NEWUSER),
        (_RET_K, 0, 0, enosys),
        (_RET_K, 0, 0, _ALLOW),
        (_RET_K, 0, 0, eperm),
    ]
    return b"".join(struct.pack("=HBBI", *ins) for ins in prog)
