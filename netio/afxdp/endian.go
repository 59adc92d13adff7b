package afxdp

import "encoding/binary"

// nativeEndian is the byte order of this machine's loads, which the XDP program's
// constants are written in.
var nativeEndian = binary.NativeEndian
