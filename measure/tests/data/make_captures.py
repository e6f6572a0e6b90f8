#!/usr/bin/env python3
"""Writes the small test captures in this directory (struct only, no libpcap,
so that the loader is checked against an independent writer).

  mixed.pcapng        little-endian pcapng, Ethernet, ns resolution (if_tsresol=9):
                      EPB TCP, NRB, ISB, EPB VLAN UDP, EPB IPv6, SPB TCP, EPB ICMP
                      -> 3 packets, 2 skipped
  bigendian_usec.pcap big-endian microsecond pcap, Ethernet: TCP, ARP, UDP
                      -> 2 packets, 1 skipped
  cooked.pcap         little-endian nanosecond pcap, LINUX_SLL: UDP, IPv6, TCP
                      -> 2 packets, 1 skipped
  tuples.dat          three 13-byte records; the first source address,
                      10.13.13.10, spells pcapng's magic number

Expected contents: measure/tests/trace_load_test.cc. Run from this directory.
"""
import struct


def ip4(s):
    return bytes(int(x) for x in s.split("."))


def ipv4(proto, src, dst, sport, dport, l4len, payload=b""):
    l4 = struct.pack("!HH", sport, dport)
    if proto == 6:
        l4 += struct.pack("!IIBBHHH", 1, 0, 0x50, 0x10, 1024, 0, 0)
    elif proto == 17:
        l4 += struct.pack("!HH", 8 + len(payload), 0)
    else:
        l4 = struct.pack("!BBHHH", 8, 0, 0, 1, 1)  # ICMP echo
    body = l4 + payload
    total = 20 + max(len(body), l4len)
    hdr = struct.pack("!BBHHHBBH4s4s", 0x45, 0, total, 1, 0x4000, 64, proto, 0, ip4(src), ip4(dst))
    return hdr + body


def eth(ethertype, payload, vlan=None):
    b = bytes.fromhex("020000000002") + bytes.fromhex("020000000001")
    if vlan is not None:
        b += struct.pack("!HH", 0x8100, vlan)
    return b + struct.pack("!H", ethertype) + payload


def sll(proto, payload):
    return struct.pack("!HHH8sH", 0, 1, 6, bytes.fromhex("0200000000010000"), proto) + payload


def pad4(b):
    return b + b"\0" * (-len(b) % 4)


def block(btype, body, e="<"):
    total = 12 + len(body)
    return struct.pack(e + "II", btype, total) + body + struct.pack(e + "I", total)


def option(code, value, e="<"):
    return struct.pack(e + "HH", code, len(value)) + pad4(value)


def pcapng():
    e = "<"
    out = b""
    shb = struct.pack(e + "IHHq", 0x1A2B3C4D, 1, 0, -1) + option(4, b"dpukit test") + option(0, b"")
    out += block(0x0A0D0D0A, shb)
    idb = struct.pack(e + "HHI", 1, 0, 262144) + option(9, b"\x09") + option(0, b"")
    out += block(1, idb)

    def epb(ts_ns, frame, orig_len):
        body = struct.pack(e + "IIIII", 0, ts_ns >> 32, ts_ns & 0xFFFFFFFF, len(frame), orig_len) + pad4(frame)
        return block(6, body)

    t0 = 1700000000 * 10**9 + 123
    out += epb(t0, eth(0x0800, ipv4(6, "10.1.1.1", "10.2.2.2", 1111, 80, 20)), 1514)
    rec = ip4("10.1.1.1") + b"host-a\0"
    nrb = struct.pack(e + "HH", 1, len(rec)) + pad4(rec) + struct.pack(e + "HH", 0, 0)
    out += block(4, nrb)
    isb = struct.pack(e + "III", 0, t0 >> 32, t0 & 0xFFFFFFFF) + option(0, b"")
    out += block(5, isb)
    out += epb(t0 + 1000, eth(0x0800, ipv4(17, "192.168.0.1", "192.168.0.2", 53, 5353, 8, b"abcd"), vlan=7), 100)
    out += epb(t0 + 2000, eth(0x86DD, bytes([0x60]) + bytes(39)), 54)
    # A simple packet block holds min(original length, snaplen) bytes: the
    # whole frame here, padded to Ethernet's 60-byte minimum.
    spb_frame = eth(0x0800, ipv4(6, "172.16.0.1", "172.16.0.2", 22, 50000, 20)) + bytes(6)
    out += block(3, struct.pack(e + "I", len(spb_frame)) + pad4(spb_frame))
    out += epb(t0 + 4000, eth(0x0800, ipv4(1, "10.9.9.9", "10.8.8.8", 0, 0, 8)), 98)
    return out


def pcap(frames, linktype, magic, endian):
    out = struct.pack(endian + "IHHiIII", magic, 2, 4, 0, 0, 65535, linktype)
    for sec, frac, frame, orig in frames:
        out += struct.pack(endian + "IIII", sec, frac, len(frame), orig) + frame
    return out


def main():
    open("mixed.pcapng", "wb").write(pcapng())
    be = [
        (1600000000, 250000, eth(0x0800, ipv4(6, "8.8.4.4", "1.1.1.1", 443, 60000, 20)), 1514),
        (1600000000, 250001, eth(0x0806, bytes(28)), 60),
        (1600000001, 999999, eth(0x0800, ipv4(17, "9.9.9.9", "1.0.0.1", 853, 40000, 8)), 400),
    ]
    open("bigendian_usec.pcap", "wb").write(pcap(be, 1, 0xA1B2C3D4, ">"))
    ck = [
        (1650000000, 5, sll(0x0800, ipv4(17, "10.0.0.5", "10.0.0.6", 5000, 6000, 8)), 90),
        (1650000000, 6, sll(0x86DD, bytes([0x60]) + bytes(39)), 56),
        (1650000000, 999999999, sll(0x0800, ipv4(6, "10.0.0.6", "10.0.0.5", 6000, 5000, 20)), 1200),
    ]
    open("cooked.pcap", "wb").write(pcap(ck, 113, 0xA1B23C4D, "<"))
    dat = b""
    for src, dst, sp, dp, pr in [("10.13.13.10", "10.0.0.1", 1234, 80, 6),
                                 ("192.0.2.1", "198.51.100.2", 53, 33333, 17),
                                 ("10.13.13.10", "10.0.0.1", 1234, 80, 6)]:
        dat += ip4(src) + ip4(dst) + struct.pack("!HHB", sp, dp, pr)
    open("tuples.dat", "wb").write(dat)


if __name__ == "__main__":
    main()
