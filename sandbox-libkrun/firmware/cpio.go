package firmware

import (
	"fmt"
	"io"
)

// cpioWriter writes a cpio archive in the "newc" format the kernel unpacks as an initramfs.
type cpioWriter struct {
	w   io.Writer
	ino int
	err error
}

const (
	cpioDir  = 0o040000
	cpioReg  = 0o100000
	cpioChar = 0o020000
)

func (c *cpioWriter) entry(name string, mode uint32, data []byte, rdevMajor, rdevMinor int) {
	if c.err != nil {
		return
	}
	c.ino++
	nlink := 1
	if mode&0o170000 == cpioDir {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		c.ino, mode, 0, 0, nlink, 0, len(data), 0, 0, rdevMajor, rdevMinor, len(name)+1, 0)
	buf := make([]byte, 0, len(hdr)+len(name)+8+len(data))
	buf = append(buf, hdr...)
	buf = append(buf, name...)
	buf = append(buf, 0)
	buf = pad4(buf)
	buf = append(buf, data...)
	buf = pad4(buf)
	_, c.err = c.w.Write(buf)
}

func pad4(b []byte) []byte {
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// Dir adds a directory.
func (c *cpioWriter) Dir(name string) { c.entry(name, cpioDir|0o755, nil, 0, 0) }

// File adds a regular file.
func (c *cpioWriter) File(name string, perm uint32, data []byte) {
	c.entry(name, cpioReg|perm, data, 0, 0)
}

// CharDev adds a character device node.
func (c *cpioWriter) CharDev(name string, perm uint32, major, minor int) {
	c.entry(name, cpioChar|perm, nil, major, minor)
}

// Close writes the trailer.
func (c *cpioWriter) Close() error {
	c.entry("TRAILER!!!", 0, nil, 0, 0)
	return c.err
}
