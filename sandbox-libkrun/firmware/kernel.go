package firmware

import (
	"bytes"
	"compress/gzip"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"

	"github.com/iii-go/iii/sandbox-libkrun/guestarch"
)

// kernelImage returns the kernel qemu boots for a, from the package's boot/vmlinuz: the ELF
// vmlinux of an x86_64 bzImage (PVH entry, faster than the bzImage), the Image of aarch64.
func kernelImage(a guestarch.Arch, vmlinuz []byte) ([]byte, error) {
	if a.Name == guestarch.AArch64.Name {
		return ExtractARM64Image(vmlinuz)
	}
	return ExtractVmlinux(vmlinuz)
}

// arm64Magic is "ARM\x64" at offset 0x38 of an arm64 Image header.
const arm64Magic = 0x644d5241

// ExtractARM64Image returns the uncompressed arm64 Image of vmlinuz: the file itself when it is
// one (Debian ships it uncompressed), else the gzip stream it holds.
func ExtractARM64Image(vmlinuz []byte) ([]byte, error) {
	img := vmlinuz
	if len(img) >= 2 && img[0] == 0x1f && img[1] == 0x8b {
		zr, err := gzip.NewReader(bytes.NewReader(img))
		if err != nil {
			return nil, fmt.Errorf("kernel: gzip: %w", err)
		}
		if img, err = io.ReadAll(zr); err != nil {
			return nil, fmt.Errorf("kernel: gzip: %w", err)
		}
	}
	if len(img) < 64 || binary.LittleEndian.Uint32(img[0x38:]) != arm64Magic {
		return nil, errors.New("kernel: not an arm64 Image (no ARM\\x64 magic at 0x38)")
	}
	return img, nil
}

// hostDebArch is Debian's name of this host's architecture.
func hostDebArch() string {
	if a, ok := guestarch.ForGOARCH(runtime.GOARCH); ok {
		return a.Debian
	}
	return runtime.GOARCH
}

// ExtractVmlinux returns the uncompressed ELF kernel inside a bzImage whose payload is LZ4.
func ExtractVmlinux(bzImage []byte) ([]byte, error) {
	if len(bzImage) < 0x250 || string(bzImage[0x202:0x206]) != "HdrS" {
		return nil, errors.New("kernel: not a bzImage (no HdrS header)")
	}
	setupSects := int(bzImage[0x1f1])
	if setupSects == 0 {
		setupSects = 4
	}
	pm := (setupSects + 1) * 512
	off := int(binary.LittleEndian.Uint32(bzImage[0x248:]))
	n := int(binary.LittleEndian.Uint32(bzImage[0x24c:]))
	if pm+off+n > len(bzImage) || n < 4 {
		return nil, fmt.Errorf("kernel: payload %d+%d beyond the image (%d bytes)", pm+off, n, len(bzImage))
	}
	payload := bzImage[pm+off : pm+off+n]
	if binary.LittleEndian.Uint32(payload) != lz4LegacyMagic {
		return nil, fmt.Errorf("kernel: payload is not LZ4 (magic % x)", payload[:4])
	}
	out, err := DecodeLZ4Legacy(payload)
	if err != nil {
		return nil, err
	}
	if _, err := elf.NewFile(bytes.NewReader(out)); err != nil {
		return nil, fmt.Errorf("kernel: decompressed payload is not ELF: %w", err)
	}
	return out, nil
}
