#!/usr/bin/env python3
# icrc_check.py FILE.pcap... : recompute the RoCEv2 ICRC of every IPv4 packet to UDP 4791 and
# compare with the trailer. Handles linktype 1 (Ethernet) and 101/228 (raw IPv4).
import struct, sys, zlib, collections
def icrc(ip):
    ihl = (ip[0] & 15) * 4
    b = bytearray(ip[:-4])
    b[1] = 0xff                        # TOS
    b[8] = 0xff                        # TTL
    b[10:12] = b'\xff\xff'             # IP checksum
    b[ihl+6:ihl+8] = b'\xff\xff'       # UDP checksum
    b[ihl+8+4] = 0xff                  # BTH resv8a
    return zlib.crc32(bytes(b), zlib.crc32(b'\xff'*8)) & 0xffffffff
for fn in sys.argv[1:]:
    d = open(fn, 'rb').read()
    magic = struct.unpack('<I', d[:4])[0]
    e = '<' if magic in (0xa1b2c3d4, 0xa1b23c4d) else '>'
    lt = struct.unpack(e+'I', d[20:24])[0]
    off = 24; tally = collections.Counter()
    while off + 16 <= len(d):
        incl = struct.unpack(e+'I', d[off+8:off+12])[0]
        pkt = d[off+16:off+16+incl]; off += 16 + incl
        if lt == 1:
            if pkt[12:14] != b'\x08\x00': continue
            pkt = pkt[14:]
        if pkt[0] >> 4 != 4 or pkt[9] != 17: continue
        tot = struct.unpack('>H', pkt[2:4])[0]; ip = pkt[:tot]; ihl = (ip[0] & 15) * 4
        if struct.unpack('>H', ip[ihl+2:ihl+4])[0] != 4791: continue
        src = '.'.join(map(str, ip[12:16])); ipid = struct.unpack('>H', ip[4:6])[0]
        ok = icrc(ip) == struct.unpack('<I', ip[-4:])[0]
        tally[(src, 'ICRC ok' if ok else 'ICRC BAD', 'id=0' if ipid == 0 else 'id!=0')] += 1
    print(fn, 'linktype', lt)
    for k, v in sorted(tally.items()): print('   %-10s %-8s %-6s %6d' % (k + (v,)))
