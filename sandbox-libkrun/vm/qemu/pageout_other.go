//go:build !linux

package qemu

// releaseFileRAM does nothing: telling the kernel which of another process's pages it may
// reclaim (process_madvise) is Linux's.
func releaseFileRAM(*proc, string) {}
