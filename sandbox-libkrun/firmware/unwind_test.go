package firmware

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"testing"
)

// testSection is one section of a hand-made relocatable ELF64 file.
type testSection struct {
	name  string
	typ   elf.SectionType
	flags elf.SectionFlag
	info  uint32
	data  []byte
}

// elf64 lays out a little-endian ELF64 relocatable file for x86_64: the header, the sections'
// data, the section name table and the section headers (a NULL one first, the name table last).
func elf64(secs []testSection) []byte {
	shstr := []byte{0}
	nameOff := make([]uint32, len(secs)+1)
	for i, s := range append(secs, testSection{name: ".shstrtab"}) {
		nameOff[i] = uint32(len(shstr))
		shstr = append(append(shstr, s.name...), 0)
	}
	le := binary.LittleEndian
	body := make([]byte, 64)
	offs := make([]uint64, len(secs)+1)
	for i, s := range secs {
		offs[i] = uint64(len(body))
		body = append(body, s.data...)
	}
	offs[len(secs)] = uint64(len(body))
	body = append(body, shstr...)
	for len(body)%8 != 0 {
		body = append(body, 0)
	}
	shoff := uint64(len(body))
	shdr := func(name uint32, typ elf.SectionType, flags elf.SectionFlag, off, size uint64, info uint32) {
		h := make([]byte, 64)
		le.PutUint32(h[0:], name)
		le.PutUint32(h[4:], uint32(typ))
		le.PutUint64(h[8:], uint64(flags))
		le.PutUint64(h[24:], off)
		le.PutUint64(h[32:], size)
		le.PutUint32(h[44:], info)
		le.PutUint64(h[48:], 1)
		body = append(body, h...)
	}
	shdr(0, elf.SHT_NULL, 0, 0, 0, 0)
	for i, s := range secs {
		shdr(nameOff[i], s.typ, s.flags, offs[i], uint64(len(s.data)), s.info)
	}
	shdr(nameOff[len(secs)], elf.SHT_STRTAB, 0, offs[len(secs)], uint64(len(shstr)), 0)
	copy(body[0:], []byte{0x7f, 'E', 'L', 'F', byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), 1})
	le.PutUint16(body[16:], uint16(elf.ET_REL))
	le.PutUint16(body[18:], uint16(elf.EM_X86_64))
	le.PutUint32(body[20:], 1)
	le.PutUint64(body[40:], shoff)
	le.PutUint16(body[52:], 64)
	le.PutUint16(body[58:], 64)
	le.PutUint16(body[60:], uint16(len(secs)+2))
	le.PutUint16(body[62:], uint16(len(secs)+1))
	return body
}

// The ORC tables of a module lose their names and SHF_ALLOC, so the kernel neither loads nor
// relocates them; every other section, and the bytes of all of them, stay as they were.
func TestHideUnwindTables(t *testing.T) {
	alloc := elf.SHF_ALLOC | elf.SHF_EXECINSTR
	ko := elf64([]testSection{
		{name: ".text", typ: elf.SHT_PROGBITS, flags: alloc, data: []byte{0xc3}},
		{name: ".orc_unwind", typ: elf.SHT_PROGBITS, flags: elf.SHF_ALLOC, data: []byte{1, 2, 3, 4, 5, 6}},
		{name: ".orc_unwind_ip", typ: elf.SHT_PROGBITS, flags: elf.SHF_ALLOC, data: []byte{7, 8, 9, 10}},
		{name: ".rela.orc_unwind_ip", typ: elf.SHT_RELA, flags: elf.SHF_INFO_LINK, info: 3, data: make([]byte, 24)},
		{name: ".modinfo", typ: elf.SHT_PROGBITS, flags: elf.SHF_ALLOC, data: []byte("name=test\x00")},
	})
	orig := bytes.Clone(ko)
	got := HideUnwindTables(ko)
	if !bytes.Equal(ko, orig) {
		t.Fatal("the input was modified in place")
	}
	f, err := elf.NewFile(bytes.NewReader(got))
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		name  string
		flags elf.SectionFlag
		data  string
	}{
		{"", 0, ""},
		{".text", alloc, "\xc3"},
		{"", 0, "\x01\x02\x03\x04\x05\x06"},
		{"", 0, "\x07\x08\x09\x0a"},
		{".rela.orc_unwind_ip", elf.SHF_INFO_LINK, string(make([]byte, 24))},
		{".modinfo", elf.SHF_ALLOC, "name=test\x00"},
		{".shstrtab", 0, ""},
	}
	if len(f.Sections) != len(want) {
		t.Fatalf("%d sections, want %d", len(f.Sections), len(want))
	}
	for i, w := range want {
		s := f.Sections[i]
		if s.Name != w.name || s.Flags != w.flags {
			t.Errorf("section %d: %q flags %v, want %q flags %v", i, s.Name, s.Flags, w.name, w.flags)
		}
		if d, _ := s.Data(); w.data != "" && string(d) != w.data {
			t.Errorf("section %d: data %q, want %q", i, d, w.data)
		}
	}
	if again := HideUnwindTables(got); !bytes.Equal(again, got) {
		t.Error("a second pass changed the module again")
	}
	for _, other := range [][]byte{[]byte("\x7fELF not really"), nil, elf64([]testSection{{name: ".text", typ: elf.SHT_PROGBITS, flags: alloc, data: []byte{0xc3}}})} {
		if out := HideUnwindTables(other); !bytes.Equal(out, other) {
			t.Errorf("%q changed to %q", other, out)
		}
	}
}
