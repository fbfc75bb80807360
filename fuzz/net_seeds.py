#!/usr/bin/env python3
"""Writes fuzz/corpus/net/: one request per method of tpusim serve, protobuf-encoded by hand (no protobuf
library needed), prefixed with the byte fuzz/fuzz_net.c reads as the method (0x80: not the first message)."""
import os
import struct

SID = b"0123456789abcdef0123456789abcdef"
M = dict(open_session=0, system_info=1, compile=2, put=3, get=4, execute=5, delete=6, memory=7, profile=8,
         health=9, watch=10, execute_stream=11)


def varint(v):
    v &= (1 << 64) - 1
    out = b""
    while True:
        b = v & 0x7F
        v >>= 7
        out += bytes([b | (0x80 if v else 0)])
        if not v:
            return out


def f_int(n, v):
    return varint(n << 3) + varint(v)


def f_bytes(n, b):
    return varint(n << 3 | 2) + varint(len(b)) + b


def f_packed(n, vals):
    return f_bytes(n, b"".join(varint(v) for v in vals))


HLO = b"HloModule add\n\nENTRY main {\n  x = f32[2,3] parameter(0)\n  ROOT s = f32[2,3] add(x, x)\n}\n"
seeds = {
    "open_session": (M["open_session"], f_bytes(1, b"python train.py (pid 12)")),
    "system_info": (M["system_info"], b""),
    "compile": (M["compile"], f_bytes(1, SID) + f_bytes(2, b"hlo") + f_bytes(3, HLO) + f_int(4, 2) + f_int(5, 4)
                + f_packed(6, range(8)) + f_bytes(7, b"exact")),
    "put_first": (M["put"], f_bytes(1, SID) + f_int(2, 3) + f_bytes(3, b"bf16") + f_packed(4, [2, 3])
                  + f_int(5, 12) + f_bytes(6, bytes(12))),
    "put_more": (M["put"] | 0x80, f_bytes(6, bytes(range(64)))),
    "get": (M["get"], f_bytes(1, SID) + f_int(2, 7) + f_int(3, 4096)),
    "execute": (M["execute"], f_bytes(1, SID) + f_int(2, 9) + f_bytes(3, f_packed(1, [1, 2])) +
                f_bytes(3, f_packed(1, [3, 4])) + f_packed(4, [0]) + f_packed(5, [0, 1])),
    "delete": (M["delete"], f_bytes(1, SID) + f_packed(2, [1, 2, 3]) + f_packed(3, [9])),
    "memory": (M["memory"], f_bytes(1, SID)),
    "profile": (M["profile"], f_bytes(1, SID) + f_int(2, 9) + f_int(3, 5)),
    "health": (M["health"], f_bytes(1, b"tpusim.v1.Tpu")),
    "execute_stream": (M["execute_stream"], f_bytes(1, f_bytes(1, SID) + f_int(2, 9) + f_bytes(3, f_packed(1, [1, 2])))),
    "host_data": (M["execute_stream"] | 0x80, f_bytes(2, f_int(1, 0) + f_int(2, 5) + f_bytes(3, bytes(16)))),
}
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "net")
os.makedirs(out, exist_ok=True)
for name, (m, body) in seeds.items():
    with open(os.path.join(out, name), "wb") as f:
        f.write(struct.pack("B", m) + body)
print(f"{len(seeds)} seeds in {out}")
