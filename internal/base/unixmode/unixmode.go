// Package unixmode converts between Unix mode bits (chmod's octal: permissions plus the setuid,
// setgid and sticky bits) and Go's fs.FileMode, which keeps those three bits elsewhere: os.Chmod
// of fs.FileMode(0o1777) would drop the sticky bit.
package unixmode

import "io/fs"

// FileMode returns the fs.FileMode of the low twelve Unix mode bits of bits.
func FileMode(bits uint32) fs.FileMode {
	m := fs.FileMode(bits & 0o777)
	if bits&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	if bits&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	if bits&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	return m
}

// Bits returns the Unix mode bits (at most 0o7777) of m's permissions and special bits.
func Bits(m fs.FileMode) uint32 {
	n := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		n |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		n |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		n |= 0o1000
	}
	return n
}
