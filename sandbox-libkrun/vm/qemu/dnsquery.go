package qemu

import (
	"encoding/binary"
	"strings"
)

// maxDNSQuery bounds what is read of a datagram to a resolver: a header, a question of the
// longest name (255 bytes) and its type and class fit well within it.
const maxDNSQuery = 512

// dnsQuestion returns the name a DNS query asks about, in lower case without a final dot
// ("" for the root). It accepts only a plain query (not a response, opcode QUERY, one question,
// no answer or authority records, at most one additional record such as EDNS's OPT), with an
// uncompressed name of letters, digits, '-' and '_' within the 255-byte limit, followed by its
// type and class; anything else is malformed and reported false.
func dnsQuestion(msg []byte) (string, bool) {
	if len(msg) < 12 {
		return "", false
	}
	flags := binary.BigEndian.Uint16(msg[2:])
	qd, an, ns, ar := binary.BigEndian.Uint16(msg[4:]), binary.BigEndian.Uint16(msg[6:]), binary.BigEndian.Uint16(msg[8:]), binary.BigEndian.Uint16(msg[10:])
	if flags&0x8000 != 0 || flags>>11&0xf != 0 || qd != 1 || an != 0 || ns != 0 || ar > 1 {
		return "", false
	}
	var name strings.Builder
	i, wire := 12, 0
	for {
		if i >= len(msg) {
			return "", false
		}
		n := int(msg[i])
		i++
		wire += n + 1
		if wire > 255 || n > 63 || i+n > len(msg) {
			return "", false // also refuses compression pointers (0xc0 and above)
		}
		if n == 0 {
			break
		}
		if name.Len() > 0 {
			name.WriteByte('.')
		}
		for _, c := range msg[i : i+n] {
			switch {
			case 'A' <= c && c <= 'Z':
				c += 'a' - 'A'
			case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_':
			default:
				return "", false
			}
			name.WriteByte(c)
		}
		i += n
	}
	if i+4 > len(msg) {
		return "", false // no type and class
	}
	return name.String(), true
}
