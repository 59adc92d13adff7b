package cmtools

import "github.com/goverbs/goverbs/cmd/goverbs/internal/tool"

// pageBuf is n bytes at the start of whole pages of their own (tool.Buffer): an
// attached device (goverbs serve) registers only whole pages. pages gives those
// pages, to register.
func pageBuf(n int) []byte { return tool.Buffer(max(n, 1))[:n] }

// pages is the whole pages under a pageBuf.
func pages(b []byte) []byte { return b[:cap(b)] }
