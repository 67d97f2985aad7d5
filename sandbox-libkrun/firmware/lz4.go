package firmware

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// lz4LegacyMagic starts an LZ4 legacy frame (the format of the kernel's compressed payload).
const lz4LegacyMagic = 0x184C2102

// DecodeLZ4Legacy decodes an LZ4 legacy frame: the magic, then blocks each preceded by its
// little-endian compressed size. Trailing bytes too short to be a block (the kernel appends the
// uncompressed size) end the stream; a repeated magic starts a concatenated frame.
func DecodeLZ4Legacy(src []byte) ([]byte, error) {
	if len(src) < 4 || binary.LittleEndian.Uint32(src) != lz4LegacyMagic {
		return nil, errors.New("lz4: not a legacy frame")
	}
	src = src[4:]
	var out []byte
	for len(src) >= 4 {
		n := binary.LittleEndian.Uint32(src)
		if n == lz4LegacyMagic {
			src = src[4:]
			continue
		}
		if n == 0 || int64(n) > int64(len(src)-4) {
			break
		}
		var err error
		out, err = decodeLZ4Block(out, src[4:4+n])
		if err != nil {
			return nil, err
		}
		src = src[4+n:]
	}
	if len(out) == 0 {
		return nil, errors.New("lz4: no blocks")
	}
	return out, nil
}

// decodeLZ4Block appends the decoding of one LZ4 block to dst. Matches may reach back into
// earlier blocks' output, which the legacy format never does but costs nothing to allow.
func decodeLZ4Block(dst, src []byte) ([]byte, error) {
	i := 0
	for i < len(src) {
		token := src[i]
		i++
		lit := int(token >> 4)
		if lit == 15 {
			for {
				if i >= len(src) {
					return nil, errors.New("lz4: truncated literal length")
				}
				b := src[i]
				i++
				lit += int(b)
				if b != 255 {
					break
				}
			}
		}
		if i+lit > len(src) {
			return nil, errors.New("lz4: literals past end of block")
		}
		dst = append(dst, src[i:i+lit]...)
		i += lit
		if i == len(src) {
			return dst, nil
		}
		if i+2 > len(src) {
			return nil, errors.New("lz4: truncated match offset")
		}
		off := int(binary.LittleEndian.Uint16(src[i:]))
		i += 2
		if off == 0 || off > len(dst) {
			return nil, fmt.Errorf("lz4: bad match offset %d", off)
		}
		ml := int(token & 15)
		if ml == 15 {
			for {
				if i >= len(src) {
					return nil, errors.New("lz4: truncated match length")
				}
				b := src[i]
				i++
				ml += int(b)
				if b != 255 {
					break
				}
			}
		}
		ml += 4
		pos := len(dst) - off
		for k := 0; k < ml; k++ {
			dst = append(dst, dst[pos+k])
		}
	}
	return dst, nil
}
