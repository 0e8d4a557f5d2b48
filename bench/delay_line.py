#!/usr/bin/env python3
"""delay_line.py — a point-to-point link with a fixed one-way delay, in user space, for kernels
without the netem qdisc (bench/netns_check.sh uses it for its DELAYS on such kernels).

Creates one TAP device in each of two network namespaces and forwards every Ethernet frame read
from one to the other after DELAY_MS (each direction keeps its order: a FIFO of due times). TAP,
not TUN: Open MPI's TCP transports skip point-to-point interfaces ("Did not find interface
matching this subnet"). Rate limits stay with tc: put tbf on the TAP devices. Prints "ready" on
stdout once both devices exist; the devices disappear when it exits (SIGTERM, or when its stdin
is closed, so that it never outlives the script that started it). Python's scheduling adds its
own latency (a few hundred µs on a busy machine) and caps the rate it can forward: measure the
link without added delay to know them.

usage: delay_line.py NS_A DEV_A NS_B DEV_B DELAY_MS    (as root)
"""
import collections
import ctypes
import fcntl
import os
import select
import signal
import struct
import sys
import time

TUNSETIFF = 0x400454CA
IFF_TAP, IFF_NO_PI = 0x0002, 0x1000
CLONE_NEWNET = 0x40000000


def open_tun_in(ns, dev):
    """Opens a TUN device named dev inside network namespace ns (this thread's namespace is
    switched there and back)."""
    libc = ctypes.CDLL(None, use_errno=True)
    home = os.open("/proc/self/ns/net", os.O_RDONLY)
    target = os.open(f"/var/run/netns/{ns}", os.O_RDONLY)
    try:
        if libc.setns(target, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into {ns}")
        fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
        fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", dev.encode(), IFF_TAP | IFF_NO_PI))
        if libc.setns(home, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "setns back")
        return fd
    finally:
        os.close(home)
        os.close(target)


def main():
    if len(sys.argv) != 6:
        sys.exit(__doc__.strip().splitlines()[-1])
    ns_a, dev_a, ns_b, dev_b = sys.argv[1:5]
    try:
        delay = float(sys.argv[5]) / 1000
    except ValueError:
        sys.exit(f"delay_line.py: DELAY_MS '{sys.argv[5]}' is not a number")
    if not delay >= 0:
        sys.exit(f"delay_line.py: DELAY_MS {sys.argv[5]} must be >= 0")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        fa = open_tun_in(ns_a, dev_a)
        fb = open_tun_in(ns_b, dev_b)
    except OSError as e:
        sys.exit(f"delay_line.py: cannot create the TUN devices: {e}")
    peer = {fa: fb, fb: fa}
    queue = {fa: collections.deque(), fb: collections.deque()}  # by output fd: (due time, packet)
    print("ready", flush=True)
    stdin = sys.stdin.fileno()
    try:
        while True:
            now = time.monotonic()
            for out, q in queue.items():
                while q and q[0][0] <= now:
                    try:
                        os.write(out, q.popleft()[1])
                    except BlockingIOError:
                        pass  # the kernel's queue is full: the packet is lost, as on a link
            due = [q[0][0] for q in queue.values() if q]
            timeout = max(0.0, min(due) - time.monotonic()) if due else None
            ready, _, _ = select.select([fa, fb, stdin], [], [], timeout)
            now = time.monotonic()
            for fd in ready:
                if fd == stdin:
                    if not os.read(stdin, 4096):
                        return
                    continue
                while True:
                    try:
                        pkt = os.read(fd, 65536)
                    except BlockingIOError:
                        break
                    queue[peer[fd]].append((now + delay, pkt))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
