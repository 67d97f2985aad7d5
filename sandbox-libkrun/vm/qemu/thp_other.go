//go:build !linux

package qemu

// noHugePages does nothing outside Linux (see thp_linux.go).
func noHugePages() {}
