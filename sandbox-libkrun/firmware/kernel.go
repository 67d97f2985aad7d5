package firmware

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
)

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
