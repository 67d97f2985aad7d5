package batchconn

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// The Autobahn|Testsuite cases of sections 1–7 (framing, pings and pongs, reserved bits,
// opcodes, fragmentation, UTF-8, close handling), driven with hand-built frames against a
// server side of this package that echoes every message (as Autobahn's fuzzingclient expects).
// Timing variants (chops with delays) are sent without the delays.

// exp is one frame the server is expected to send: a data frame or pong with its payload, or a
// close with code (noStatus: a close without status).
type exp struct {
	op      byte
	payload []byte
	code    int
}

const noStatus = -1

func echo(op byte, p []byte) exp { return exp{op: op, payload: p} }
func pong(p []byte) exp          { return exp{op: opPong, payload: p} }
func closed(code int) exp        { return exp{op: opClose, code: code} }

// fr is a masked frame with first byte first (FIN, RSV, opcode).
func fr(first byte, p []byte) []byte {
	return appendFrameOp(nil, first, p, []byte{0x37, 0xfa, 0x21, 0x3d})
}

func frClose(code int, reason []byte) []byte {
	return fr(0x80|opClose, append(binary.BigEndian.AppendUint16(nil, uint16(code)), reason...))
}

// How a case's frames are written: all at once, each frame with its own write, one byte per write.
const (
	together = iota
	framewise
	octetwise
	chops997 // chops of 997 bytes
	chops    // writes ending at splitAt
)

type acase struct {
	id, desc string
	frames   [][]byte
	how      int
	want     []exp // after them: if the last is no close, a 1000 close must be echoed (the connection still works)
	splitAt  []int // how == chops: the offsets in the frames' bytes where a write ends
}

func autobahnCases() []acase {
	var cs []acase
	add := func(id, desc string, how int, frames [][]byte, want ...exp) {
		cs = append(cs, acase{id: id, desc: desc, frames: frames, how: how, want: want})
	}
	fs := func(f ...[]byte) [][]byte { return f }
	text := func(p string) []byte { return fr(0x80|OpText, []byte(p)) }
	ping := func(p string) []byte { return fr(0x80|opPing, []byte(p)) }
	pl := func(n int, c byte) []byte { return bytes.Repeat([]byte{c}, n) }

	// 1 Framing.
	for i, n := range []int{0, 125, 126, 127, 128, 65535, 65536} {
		add(fmt.Sprintf("1.1.%d", i+1), fmt.Sprintf("text message of %d bytes", n), together, fs(fr(0x81, pl(n, '*'))), echo(OpText, pl(n, '*')))
	}
	add("1.1.8", "text message of 65536 bytes in chops of 997", chops997, fs(fr(0x81, pl(65536, '*'))), echo(OpText, pl(65536, '*')))
	for i, n := range []int{0, 125, 126, 127, 128, 65535, 65536} {
		add(fmt.Sprintf("1.2.%d", i+1), fmt.Sprintf("binary message of %d bytes", n), together, fs(fr(0x82, pl(n, 0xfe))), echo(OpBinary, pl(n, 0xfe)))
	}
	add("1.2.8", "binary message of 65536 bytes in chops of 997", chops997, fs(fr(0x82, pl(65536, 0xfe))), echo(OpBinary, pl(65536, 0xfe)))

	// 2 Pings and pongs.
	add("2.1", "ping without payload", together, fs(ping("")), pong(nil))
	add("2.2", "ping with a small text payload", together, fs(ping("Hello, world!")), pong([]byte("Hello, world!")))
	bin := []byte{0x00, 0xff, 0xfe, 0xfd, 0xfc, 0xfb, 0x00, 0xff}
	add("2.3", "ping with a small binary payload", together, fs(fr(0x89, bin)), pong(bin))
	add("2.4", "ping with a 125-byte payload", together, fs(fr(0x89, pl(125, 0xfe))), pong(pl(125, 0xfe)))
	add("2.5", "ping with a 126-byte payload", together, fs(fr(0x89, pl(126, 0xfe))), closed(StatusProtocolError))
	add("2.6", "ping with a 125-byte payload, one byte per write", octetwise, fs(fr(0x89, pl(125, 0xfe))), pong(pl(125, 0xfe)))
	add("2.7", "unsolicited pong without payload", together, fs(fr(0x8a, nil)))
	add("2.8", "unsolicited pong with payload", together, fs(fr(0x8a, []byte("unsolicited pong payload"))))
	add("2.9", "unsolicited pong, then ping", together, fs(fr(0x8a, []byte("unsolicited pong payload")), ping("ping payload")), pong([]byte("ping payload")))
	var pings [][]byte
	var pongs []exp
	for range 10 {
		pings = append(pings, ping("payload"))
		pongs = append(pongs, pong([]byte("payload")))
	}
	add("2.10", "10 pings", together, pings, pongs...)
	add("2.11", "10 pings, one byte per write", octetwise, pings, pongs...)

	// 3 Reserved bits.
	add("3.1", "text with RSV = 1", together, fs(fr(0x80|0x40|OpText, []byte("Hello, world!"))), closed(StatusProtocolError))
	add("3.2", "text, text with RSV = 2, ping", together, fs(text("Hello, world!"), fr(0x80|0x20|OpText, []byte("Hello, world!")), ping("")),
		echo(OpText, []byte("Hello, world!")), closed(StatusProtocolError))
	add("3.3", "text, text with RSV = 3, ping, frame-wise", framewise, fs(text("Hello, world!"), fr(0x80|0x60|OpText, []byte("Hello, world!")), ping("")),
		echo(OpText, []byte("Hello, world!")), closed(StatusProtocolError))
	add("3.4", "text, text with RSV = 4, ping, octet-wise", octetwise, fs(text("Hello, world!"), fr(0x80|0x10|OpText, []byte("Hello, world!")), ping("")),
		echo(OpText, []byte("Hello, world!")), closed(StatusProtocolError))
	add("3.5", "binary with RSV = 5", together, fs(fr(0x80|0x50|OpBinary, bin)), closed(StatusProtocolError))
	add("3.6", "ping with RSV = 6", together, fs(fr(0x80|0x60|opPing, []byte("Hello, world!"))), closed(StatusProtocolError))
	add("3.7", "close with RSV = 7", together, fs(fr(0x80|0x70|opClose, nil)), closed(StatusProtocolError))

	// 4 Opcodes.
	for i, op := range []byte{3, 4, 5, 6, 7} {
		id := fmt.Sprintf("4.1.%d", i+1)
		switch i {
		case 0:
			add(id, "reserved non-control opcode 3", together, fs(fr(0x80|op, nil)), closed(StatusProtocolError))
		case 1:
			add(id, "reserved non-control opcode 4 with payload", together, fs(fr(0x80|op, []byte("reserved opcode payload"))), closed(StatusProtocolError))
		default:
			add(id, fmt.Sprintf("text, reserved non-control opcode %d with payload, ping", op), together,
				fs(text("Hello, world!"), fr(0x80|op, []byte("reserved opcode payload")), ping("")), echo(OpText, []byte("Hello, world!")), closed(StatusProtocolError))
		}
	}
	for i, op := range []byte{11, 12, 13, 14, 15} {
		id := fmt.Sprintf("4.2.%d", i+1)
		switch i {
		case 0:
			add(id, "reserved control opcode 11", together, fs(fr(0x80|op, nil)), closed(StatusProtocolError))
		case 1:
			add(id, "reserved control opcode 12 with payload", together, fs(fr(0x80|op, []byte("reserved opcode payload"))), closed(StatusProtocolError))
		default:
			add(id, fmt.Sprintf("text, reserved control opcode %d with payload, ping", op), together,
				fs(text("Hello, world!"), fr(0x80|op, []byte("reserved opcode payload")), ping("")), echo(OpText, []byte("Hello, world!")), closed(StatusProtocolError))
		}
	}

	// 5 Fragmentation.
	f1, f2 := []byte("fragment1"), []byte("fragment2")
	add("5.1", "ping in 2 fragments", together, fs(fr(opPing, f1), fr(0x80|opContinuation, f2)), closed(StatusProtocolError))
	add("5.2", "pong in 2 fragments", together, fs(fr(opPong, f1), fr(0x80|opContinuation, f2)), closed(StatusProtocolError))
	two := fs(fr(OpText, f1), fr(0x80|opContinuation, f2))
	joined := []byte("fragment1fragment2")
	add("5.3", "text in 2 fragments", together, two, echo(OpText, joined))
	add("5.4", "text in 2 fragments, frame-wise", framewise, two, echo(OpText, joined))
	add("5.5", "text in 2 fragments, octet-wise", octetwise, two, echo(OpText, joined))
	withPing := fs(fr(OpText, f1), ping("pongme!"), fr(0x80|opContinuation, f2))
	add("5.6", "text in 2 fragments, ping between", together, withPing, pong([]byte("pongme!")), echo(OpText, joined))
	add("5.7", "text in 2 fragments, ping between, frame-wise", framewise, withPing, pong([]byte("pongme!")), echo(OpText, joined))
	add("5.8", "text in 2 fragments, ping between, octet-wise", octetwise, withPing, pong([]byte("pongme!")), echo(OpText, joined))
	contFin := fs(fr(0x80|opContinuation, []byte("non-continuation payload")), text("Hello, world!"))
	add("5.9", "continuation (FIN) with nothing to continue, then text", together, contFin, closed(StatusProtocolError))
	add("5.10", "continuation (FIN) with nothing to continue, then text, frame-wise", framewise, contFin, closed(StatusProtocolError))
	add("5.11", "continuation (FIN) with nothing to continue, then text, octet-wise", octetwise, contFin, closed(StatusProtocolError))
	cont := fs(fr(opContinuation, []byte("non-continuation payload")), text("Hello, world!"))
	add("5.12", "continuation (no FIN) with nothing to continue, then text", together, cont, closed(StatusProtocolError))
	add("5.13", "continuation (no FIN) with nothing to continue, then text, frame-wise", framewise, cont, closed(StatusProtocolError))
	add("5.14", "continuation (no FIN) with nothing to continue, then text, octet-wise", octetwise, cont, closed(StatusProtocolError))
	add("5.15", "text in 2 fragments, then continuation, then text (FIN)", together,
		fs(fr(OpText, f1), fr(0x80|opContinuation, f2), fr(opContinuation, []byte("fragment3")), fr(0x80|OpText, []byte("fragment4"))),
		echo(OpText, joined), closed(StatusProtocolError))
	f3 := []byte("fragment3")
	add("5.16", "twice: continuation, text, continuation (FIN)", together,
		fs(fr(opContinuation, f1), fr(OpText, f2), fr(0x80|opContinuation, f3), fr(opContinuation, f1), fr(OpText, f2), fr(0x80|opContinuation, f3)),
		closed(StatusProtocolError))
	add("5.17", "twice: continuation (FIN), text, continuation (FIN)", together,
		fs(fr(0x80|opContinuation, f1), fr(OpText, f2), fr(0x80|opContinuation, f3), fr(0x80|opContinuation, f1), fr(OpText, f2), fr(0x80|opContinuation, f3)),
		closed(StatusProtocolError))
	add("5.18", "text in 2 fragments, both with the text opcode", together, fs(fr(OpText, f1), fr(0x80|OpText, f2)), closed(StatusProtocolError))
	five := fs(fr(OpText, []byte("fragment1")), fr(opContinuation, []byte("fragment2")), ping("pongme 1!"), fr(opContinuation, []byte("fragment3")),
		fr(opContinuation, []byte("fragment4")), ping("pongme 2!"), fr(0x80|opContinuation, []byte("fragment5")))
	all5 := []byte("fragment1fragment2fragment3fragment4fragment5")
	add("5.19", "text in 5 fragments, pings after the 2nd and 4th (sent without the delays)", framewise, five,
		pong([]byte("pongme 1!")), pong([]byte("pongme 2!")), echo(OpText, all5))
	add("5.20", "as 5.19, octet-wise", octetwise, five, pong([]byte("pongme 1!")), pong([]byte("pongme 2!")), echo(OpText, all5))

	// 6 UTF-8 handling.
	add("6.1.1", "text of length 0", together, fs(fr(0x81, nil)), echo(OpText, []byte{}))
	add("6.1.2", "text in 3 empty fragments", together, fs(fr(OpText, nil), fr(opContinuation, nil), fr(0x80|opContinuation, nil)), echo(OpText, []byte{}))
	add("6.1.3", "text in 3 fragments, only the middle one with payload", together,
		fs(fr(OpText, nil), fr(opContinuation, []byte("middle frame payload")), fr(0x80|opContinuation, nil)), echo(OpText, []byte("middle frame payload")))
	hello := []byte("Hello-µ@ßöäüàá-UTF-8!!")
	add("6.2.1", "valid UTF-8 text in one fragment", together, fs(fr(0x81, hello)), echo(OpText, hello))
	add("6.2.2", "valid UTF-8 text in 2 fragments, cut between code points", together,
		fs(fr(OpText, hello[:12]), fr(0x80|opContinuation, hello[12:])), echo(OpText, hello))
	add("6.2.3", "valid UTF-8 text in 1-byte fragments", together, bytewiseFragments(hello), echo(OpText, hello))
	kosme := []byte("\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5")
	add("6.2.4", "κόσμε in 1-byte fragments", together, bytewiseFragments(kosme), echo(OpText, kosme))
	bad := []byte("\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5\xed\xa0\x80\x65\x64\x69\x74\x65\x64")
	add("6.3.1", "invalid UTF-8 text in one fragment", together, fs(fr(0x81, bad)), closed(StatusInvalidPayload))
	add("6.3.2", "invalid UTF-8 text in 1-byte fragments", together, bytewiseFragments(bad), closed(StatusInvalidPayload))
	// Fail fast: only the fragments up to the invalid one are sent; the close must come
	// without the rest.
	add("6.4.1", "fragments valid, invalid (\\xf4\\x90\\x80\\x80), ...: fails before the 3rd", framewise,
		fs(fr(OpText, kosme), fr(opContinuation, []byte("\xf4\x90\x80\x80"))), closed(StatusInvalidPayload))
	add("6.4.2", "fragments valid+\\xf4, \\x90 (an impossible prefix), ...: fails before the 3rd", framewise,
		fs(fr(OpText, append(append([]byte{}, kosme...), 0xf4)), fr(opContinuation, []byte{0x90})), closed(StatusInvalidPayload))
	badOne := fr(0x81, append(append(append([]byte{}, kosme...), 0xf4, 0x90, 0x80, 0x80), "edited"...))
	head := 6 + len(kosme) // a short masked frame's header is 6 bytes
	add("6.4.3", "one frame in 3 chops: header and valid part, the invalid 4 bytes, the rest (detected at the frame's end: non-strict)", chops,
		fs(badOne), closed(StatusInvalidPayload))
	cs[len(cs)-1].splitAt = []int{head, head + 4}
	add("6.4.4", "one frame in 3 chops: header and valid part, \\xf4, the rest (non-strict)", chops,
		fs(badOne), closed(StatusInvalidPayload))
	cs[len(cs)-1].splitAt = []int{head, head + 1}
	for i, cat := range utf8Sequences() {
		for j, s := range cat.seqs {
			id := fmt.Sprintf("6.%d.%d", i+5, j+1)
			want := closed(StatusInvalidPayload)
			if s.valid {
				want = echo(OpText, s.b)
			}
			add(id, fmt.Sprintf("%s: %x", cat.name, s.b), together, fs(fr(0x81, s.b)), want)
		}
	}

	// 7 Close handling.
	c1000 := frClose(StatusNormalClosure, nil)
	add("7.1.1", "text, then close", together, fs(text("Hello World!"), c1000), echo(OpText, []byte("Hello World!")), closed(StatusNormalClosure))
	add("7.1.2", "close twice", together, fs(c1000, c1000), closed(StatusNormalClosure))
	add("7.1.3", "close, then ping: no pong", together, fs(c1000, ping("Hello World!")), closed(StatusNormalClosure))
	add("7.1.4", "close, then text: no echo", together, fs(c1000, text("Hello World!")), closed(StatusNormalClosure))
	add("7.1.5", "first fragment, close, continuation: no echo", together,
		fs(fr(OpText, []byte("fragment1")), c1000, fr(0x80|opContinuation, []byte("fragment2"))), closed(StatusNormalClosure))
	add("7.1.6", "256 KiB text, close, ping", together, fs(fr(0x81, pl(256<<10, 'B')), c1000, ping("")),
		echo(OpText, pl(256<<10, 'B')), closed(StatusNormalClosure))
	add("7.3.1", "close with an empty payload", together, fs(fr(0x80|opClose, nil)), closed(noStatus))
	add("7.3.2", "close with a 1-byte payload", together, fs(fr(0x80|opClose, []byte{0x03})), closed(StatusProtocolError))
	add("7.3.3", "close 1000 without reason", together, fs(c1000), closed(StatusNormalClosure))
	add("7.3.4", "close 1000 with a reason", together, fs(frClose(1000, []byte("Hello World!"))), closed(StatusNormalClosure))
	add("7.3.5", "close 1000 with a 123-byte reason", together, fs(frClose(1000, pl(123, '*'))), closed(StatusNormalClosure))
	add("7.3.6", "close 1000 with a 124-byte reason (payload 126)", together, fs(frClose(1000, pl(124, '*'))), closed(StatusProtocolError))
	add("7.5.1", "close 1000 with a reason that is not UTF-8", together, fs(frClose(1000, bad)), closed(StatusInvalidPayload))
	for i, code := range []int{1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 3000, 3999, 4000, 4999} {
		add(fmt.Sprintf("7.7.%d", i+1), fmt.Sprintf("close with valid code %d", code), together, fs(frClose(code, nil)), closed(code))
	}
	for i, code := range []int{0, 999, 1004, 1005, 1006, 1016, 1100, 2000, 2999} {
		add(fmt.Sprintf("7.9.%d", i+1), fmt.Sprintf("close with invalid code %d", code), together, fs(frClose(code, nil)), closed(StatusProtocolError))
	}
	add("7.13.1", "close with code 5000", together, fs(frClose(5000, nil)), closed(StatusProtocolError))
	add("7.13.2", "close with code 65535", together, fs(frClose(65535, nil)), closed(StatusProtocolError))
	return cs
}

func bytewiseFragments(p []byte) [][]byte {
	var fs [][]byte
	for i := range p {
		first := byte(opContinuation)
		if i == 0 {
			first = OpText
		}
		if i == len(p)-1 {
			first |= 0x80
		}
		fs = append(fs, fr(first, p[i:i+1]))
	}
	return fs
}

type utf8Seq struct {
	valid bool
	b     []byte
}

type utf8Category struct {
	name string
	seqs []utf8Seq
}

// utf8Sequences are the test sequences of Autobahn's cases 6.5–6.23 (from Markus Kuhn's
// UTF-8-test.txt), in its order, each with whether it is valid UTF-8.
func utf8Sequences() []utf8Category {
	v := func(s string) utf8Seq { return utf8Seq{true, []byte(s)} }
	x := func(s string) utf8Seq { return utf8Seq{false, []byte(s)} }
	kosme := "\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5"
	var prefixes []utf8Seq
	for i := 1; i <= len(kosme); i++ {
		complete := map[int]bool{2: true, 5: true, 7: true, 9: true, 11: true}[i]
		prefixes = append(prefixes, utf8Seq{complete, []byte(kosme[:i])})
	}
	var cont string
	for b := 0x80; b < 0xbf; b++ {
		cont += string([]byte{byte(b)})
	}
	var lonely []utf8Seq
	for _, r := range [][2]int{{0xc0, 0xdf}, {0xe0, 0xef}, {0xf0, 0xf7}, {0xf8, 0xfb}, {0xfc, 0xfd}} {
		var s []byte
		for b := r[0]; b < r[1]; b++ {
			s = append(s, byte(b), ' ')
		}
		lonely = append(lonely, utf8Seq{false, s})
	}
	missing := []string{"\xc0", "\xe0\x80", "\xf0\x80\x80", "\xf8\x80\x80\x80", "\xfc\x80\x80\x80\x80",
		"\xdf", "\xef\xbf", "\xf7\xbf\xbf", "\xfb\xbf\xbf\xbf", "\xfd\xbf\xbf\xbf\xbf"}
	var missingSeqs []utf8Seq
	for _, s := range missing {
		missingSeqs = append(missingSeqs, x(s))
	}
	nonchars := []utf8Seq{v("\xef\xbf\xbe"), v("\xef\xbf\xbf")}
	for _, z1 := range []byte{0xf0, 0xf1, 0xf2, 0xf3, 0xf4} {
		for _, z2 := range []byte{0x8f, 0x9f, 0xaf, 0xbf} {
			if z1 == 0xf4 && z2 != 0x8f {
				continue // past U+10FFFF
			}
			for _, z3 := range []byte{0xbe, 0xbf} {
				if z1 == 0xf0 && z2 == 0x8f {
					continue // overlong
				}
				nonchars = append(nonchars, utf8Seq{true, []byte{z1, z2, 0xbf, z3}})
			}
		}
	}
	return []utf8Category{
		{"some valid UTF-8", []utf8Seq{v("hello\x24world"), v("hello\xc2\xa2world"), v("hello\xe2\x82\xacworld"), v("hello\xf0\xa4\xad\xa2world"), v(kosme)}},
		{"prefixes of κόσμε", prefixes},
		{"first sequence of a length", []utf8Seq{v("\x00"), v("\xc2\x80"), v("\xe0\xa0\x80"), v("\xf0\x90\x80\x80")}},
		{"first sequence of length 5/6", []utf8Seq{x("\xf8\x88\x80\x80\x80"), x("\xfc\x84\x80\x80\x80\x80")}},
		{"last sequence of a length", []utf8Seq{v("\x7f"), v("\xdf\xbf"), v("\xef\xbf\xbf"), v("\xf4\x8f\xbf\xbf")}},
		{"last sequence of length 4/5/6", []utf8Seq{x("\xf7\xbf\xbf\xbf"), x("\xfb\xbf\xbf\xbf\xbf"), x("\xfd\xbf\xbf\xbf\xbf\xbf")}},
		{"other boundaries", []utf8Seq{v("\xed\x9f\xbf"), v("\xee\x80\x80"), v("\xef\xbf\xbd"), v("\xf4\x8f\xbf\xbf"), x("\xf4\x90\x80\x80")}},
		{"unexpected continuation bytes", []utf8Seq{x("\x80"), x("\xbf"), x("\x80\xbf"), x("\x80\xbf\x80"), x("\x80\xbf\x80\xbf"),
			x("\x80\xbf\x80\xbf\x80"), x("\x80\xbf\x80\xbf\x80\xbf"), x(cont)}},
		{"lonely start bytes", lonely},
		{"last continuation byte missing", missingSeqs},
		{"incomplete sequences concatenated", []utf8Seq{x(strings.Join(missing, ""))}},
		{"impossible bytes", []utf8Seq{x("\xfe"), x("\xff"), x("\xfe\xfe\xff\xff")}},
		{"overlong ASCII", []utf8Seq{x("\xc0\xaf"), x("\xe0\x80\xaf"), x("\xf0\x80\x80\xaf"), x("\xf8\x80\x80\x80\xaf"), x("\xfc\x80\x80\x80\x80\xaf")}},
		{"maximum overlong", []utf8Seq{x("\xc1\xbf"), x("\xe0\x9f\xbf"), x("\xf0\x8f\xbf\xbf"), x("\xf8\x87\xbf\xbf\xbf"), x("\xfc\x83\xbf\xbf\xbf\xbf")}},
		{"overlong NUL", []utf8Seq{x("\xc0\x80"), x("\xe0\x80\x80"), x("\xf0\x80\x80\x80"), x("\xf8\x80\x80\x80\x80"), x("\xfc\x80\x80\x80\x80\x80")}},
		{"single UTF-16 surrogates", []utf8Seq{x("\xed\xa0\x80"), x("\xed\xad\xbf"), x("\xed\xae\x80"), x("\xed\xaf\xbf"), x("\xed\xb0\x80"), x("\xed\xbe\x80"), x("\xed\xbf\xbf")}},
		{"paired UTF-16 surrogates", []utf8Seq{x("\xed\xa0\x80\xed\xb0\x80"), x("\xed\xa0\x80\xed\xbf\xbf"), x("\xed\xad\xbf\xed\xb0\x80"), x("\xed\xad\xbf\xed\xbf\xbf"),
			x("\xed\xae\x80\xed\xb0\x80"), x("\xed\xae\x80\xed\xbf\xbf"), x("\xed\xaf\xbf\xed\xb0\x80"), x("\xed\xaf\xbf\xed\xbf\xbf")}},
		{"noncharacters (valid)", nonchars},
		{"specials", []utf8Seq{v("\xef\xbf\xb9"), v("\xef\xbf\xba"), v("\xef\xbf\xbb"), v("\xef\xbf\xbc"), v("\xef\xbf\xbd"), v("\xef\xbf\xbe"), v("\xef\xbf\xbf")}},
	}
}

// echoServer serves this package's server side, echoing every message with its opcode.
func conformanceServer(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := Accept(w, r, 5*time.Second)
		if err != nil {
			return
		}
		defer c.Close()
		c.SetReadLimit(16 << 20)
		var buf []byte
		for {
			op, msg, err := c.ReadMessage(buf, nil)
			if err != nil {
				return
			}
			if op == OpText {
				err = c.WriteText([][]byte{msg}, false)
			} else {
				_, err = c.Write(appendFrameOp(nil, 0x80|OpBinary, msg, nil))
			}
			if err != nil {
				return
			}
			buf = msg[:0]
		}
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// runCase drives one case on a new connection and describes what the server did, or fails.
func runCase(t *testing.T, addr string, c acase) (string, error) {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		return "", err
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second)) // failure guard only
	fmt.Fprintf(nc, "GET / HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", addr)
	br := bufio.NewReader(nc)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		return "", fmt.Errorf("handshake: %v", err)
	}
	// The frames are written while the answers are read, so that a server that closes early
	// is seen before a later write could reset the connection.
	var chunks [][]byte
	switch c.how {
	case together:
		chunks = [][]byte{bytes.Join(c.frames, nil)}
	case framewise:
		chunks = c.frames
	case chops:
		all, from := bytes.Join(c.frames, nil), 0
		for _, at := range append(c.splitAt, len(bytes.Join(c.frames, nil))) {
			chunks = append(chunks, all[from:at])
			from = at
		}
	case octetwise, chops997:
		n := 1
		if c.how == chops997 {
			n = 997
		}
		for _, f := range c.frames {
			for i := 0; i < len(f); i += n {
				chunks = append(chunks, f[i:min(i+n, len(f))])
			}
		}
	}
	sawClose := make(chan struct{})
	go func() {
		for _, ch := range chunks {
			select {
			case <-sawClose:
				return
			default:
			}
			if _, err := nc.Write(ch); err != nil {
				return
			}
		}
	}()
	want := c.want
	if len(want) == 0 || want[len(want)-1].op != opClose {
		want = append(append([]exp{}, want...), exp{op: opClose, code: StatusNormalClosure, payload: []byte("ours")})
	}
	var got []string
	for _, w := range want {
		if w.payload != nil && string(w.payload) == "ours" { // the connection still works: our close is echoed
			if _, err := nc.Write(frClose(StatusNormalClosure, nil)); err != nil {
				return "", fmt.Errorf("after %v: writing our close: %v", got, err)
			}
		}
		op, p, err := readAnyFrame(br)
		if err != nil {
			return "", fmt.Errorf("after %v: want %s, got %v", got, describe(w.op, w.payload, w.code), err)
		}
		code := noStatus
		if op == opClose {
			close(sawClose)
			if len(p) >= 2 {
				code = int(binary.BigEndian.Uint16(p))
			}
		}
		g := describe(op, p, code)
		got = append(got, g)
		if op != w.op || (op == opClose && code != w.code) || (op != opClose && !bytes.Equal(p, w.payload)) {
			return "", fmt.Errorf("after %v: want %s, got %s", got[:len(got)-1], describe(w.op, w.payload, w.code), g)
		}
	}
	if op, p, err := readAnyFrame(br); err == nil { // after its close, the server sends nothing
		return "", fmt.Errorf("%v, then %s after the close", got, describe(op, p, noStatus))
	}
	return strings.Join(got, ", "), nil
}

func describe(op byte, p []byte, code int) string {
	switch op {
	case opClose:
		if code == noStatus {
			return "close (no status)"
		}
		return fmt.Sprintf("close %d", code)
	case opPong:
		return fmt.Sprintf("pong(%d bytes)", len(p))
	case OpText:
		return fmt.Sprintf("text echo(%d bytes)", len(p))
	case OpBinary:
		return fmt.Sprintf("binary echo(%d bytes)", len(p))
	}
	return fmt.Sprintf("opcode %d", op)
}

// TestAutobahnConformance runs the cases of Autobahn|Testsuite sections 1–7 and lists each
// with the server's answer.
func TestAutobahnConformance(t *testing.T) {
	addr := conformanceServer(t)
	var report strings.Builder
	for _, c := range autobahnCases() {
		t.Run(c.id, func(t *testing.T) {
			outcome, err := runCase(t, addr, c)
			if err != nil {
				t.Fatalf("%s (%s): %v", c.id, c.desc, err)
			}
			fmt.Fprintf(&report, "%-7s %s -> %s\n", c.id, c.desc, outcome)
		})
	}
	t.Logf("Autobahn sections 1-7, %d cases:\n%s", len(autobahnCases()), report.String())
}
