package qemu

import (
	"encoding/binary"
	"strings"
	"testing"
)

// query builds a DNS query for name (labels as given) with the header fields set.
func query(flags, qd, an, ar uint16, labels ...string) []byte {
	b := make([]byte, 12)
	binary.BigEndian.PutUint16(b, 0x1234)
	binary.BigEndian.PutUint16(b[2:], flags)
	binary.BigEndian.PutUint16(b[4:], qd)
	binary.BigEndian.PutUint16(b[6:], an)
	binary.BigEndian.PutUint16(b[10:], ar)
	for _, l := range labels {
		b = append(b, byte(len(l)))
		b = append(b, l...)
	}
	return append(b, 0, 0, 1, 0, 1)
}

func TestDNSQuestion(t *testing.T) {
	for _, c := range []struct {
		msg  []byte
		want string
	}{
		{query(0x0100, 1, 0, 0, "api", "Example", "COM"), "api.example.com"},
		{query(0x0100, 1, 0, 1, "svc_x", "a-b", "net"), "svc_x.a-b.net"},
		{query(0, 1, 0, 0), ""},
		{append(query(0x0100, 1, 0, 1, "a", "io"), 0, 0, 41, 4, 0, 0, 0, 0, 0, 0, 0), "a.io"}, // EDNS OPT after the question
	} {
		got, ok := dnsQuestion(c.msg)
		if !ok || got != c.want {
			t.Errorf("%x: %q %v, want %q", c.msg, got, ok, c.want)
		}
	}
	long := make([]string, 0, 5)
	for range 5 {
		long = append(long, strings.Repeat("a", 60))
	}
	ptr := query(0x0100, 1, 0, 0, "a")
	ptr = append(ptr[:12], 0xc0, 0x0c, 0, 1, 0, 1)
	for name, msg := range map[string][]byte{
		"short":          make([]byte, 11),
		"response":       query(0x8180, 1, 0, 0, "a", "com"),
		"opcode":         query(0x2800, 1, 0, 0, "a", "com"),
		"two questions":  query(0x0100, 2, 0, 0, "a", "com"),
		"no question":    query(0x0100, 0, 0, 0, "a", "com"),
		"answers":        query(0x0100, 1, 1, 0, "a", "com"),
		"additional":     query(0x0100, 1, 0, 2, "a", "com"),
		"dot in label":   query(0x0100, 1, 0, 0, "a.b", "com"),
		"odd byte":       query(0x0100, 1, 0, 0, "a\x00b", "com"),
		"long name":      query(0x0100, 1, 0, 0, long...),
		"long label":     query(0x0100, 1, 0, 0, strings.Repeat("a", 64), "com"),
		"pointer":        ptr,
		"no type":        query(0x0100, 1, 0, 0, "a", "com")[:12+7],
		"truncated name": query(0x0100, 1, 0, 0, "abc", "com")[:14],
	} {
		if got, ok := dnsQuestion(msg); ok {
			t.Errorf("%s: accepted as %q", name, got)
		}
	}
}

func FuzzDNSQuestion(f *testing.F) {
	f.Add(query(0x0100, 1, 0, 0, "api", "example", "com"))
	f.Add(query(0x0100, 1, 0, 1, "a", "io"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, msg []byte) {
		name, ok := dnsQuestion(msg)
		if !ok {
			return
		}
		if len(name) > 253 || strings.Trim(name, "abcdefghijklmnopqrstuvwxyz0123456789-_.") != "" || strings.Contains(name, "..") {
			t.Fatalf("%x: accepted name %q", msg, name)
		}
	})
}
