package firmware

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Module is a kernel module file with the names it depends on.
type Module struct {
	Name    string
	Path    string
	Depends []string
}

// ScanModules indexes every .ko under dir by module name (dashes folded to underscores).
func ScanModules(dir string) (map[string]Module, error) {
	idx := map[string]Module{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".ko") {
			return err
		}
		m, err := readModinfo(p)
		if err != nil {
			return err
		}
		idx[m.Name] = m
		return nil
	})
	return idx, err
}

func modName(s string) string { return strings.ReplaceAll(s, "-", "_") }

func readModinfo(path string) (Module, error) {
	f, err := elf.Open(path)
	if err != nil {
		return Module{}, fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	m := Module{Path: path, Name: modName(strings.TrimSuffix(filepath.Base(path), ".ko"))}
	sec := f.Section(".modinfo")
	if sec == nil {
		return m, nil
	}
	data, err := sec.Data()
	if err != nil {
		return Module{}, fmt.Errorf("%s: .modinfo: %w", path, err)
	}
	for _, kv := range bytes.Split(data, []byte{0}) {
		k, v, ok := strings.Cut(string(kv), "=")
		if !ok {
			continue
		}
		switch k {
		case "name":
			m.Name = modName(v)
		case "depends":
			for _, d := range strings.Split(v, ",") {
				if d != "" {
					m.Depends = append(m.Depends, modName(d))
				}
			}
		}
	}
	return m, nil
}

// readBuiltin lists the modules the kernel of the modules directory dir builds in, by name, from
// its modules.builtin (none when the file is absent).
func readBuiltin(dir string) (map[string]bool, error) {
	b, err := os.ReadFile(filepath.Join(dir, "modules.builtin"))
	if os.IsNotExist(err) {
		return map[string]bool{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, line := range strings.Fields(string(b)) {
		out[modName(strings.TrimSuffix(filepath.Base(line), ".ko"))] = true
	}
	return out, nil
}

// notBuiltin returns the names of want that builtin does not hold.
func notBuiltin(want []string, builtin map[string]bool) []string {
	var out []string
	for _, w := range want {
		if !builtin[modName(w)] {
			out = append(out, w)
		}
	}
	return out
}

// LoadOrder returns the modules needed for want, each after everything it depends on.
func LoadOrder(idx map[string]Module, want []string) ([]Module, error) {
	var order []Module
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(name string, from string) error
	visit = func(name, from string) error {
		switch state[name] {
		case 2:
			return nil
		case 1:
			return fmt.Errorf("module dependency cycle at %s", name)
		}
		m, ok := idx[name]
		if !ok {
			if from == "" {
				return fmt.Errorf("module %s not found in the kernel package", name)
			}
			return fmt.Errorf("module %s (needed by %s) not found", name, from)
		}
		state[name] = 1
		for _, d := range m.Depends {
			if err := visit(d, name); err != nil {
				return err
			}
		}
		state[name] = 2
		order = append(order, m)
		return nil
	}
	for _, w := range want {
		if err := visit(modName(w), ""); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// unwindSections are the x86 ORC unwind tables of a module (arm64 modules have none).
var unwindSections = map[string]bool{".orc_unwind": true, ".orc_unwind_ip": true}

// HideUnwindTables makes the kernel's module loader skip the ORC unwind tables of a 64-bit ELF
// module: each loses its name and its SHF_ALLOC flag, so it is neither copied into module memory
// nor relocated (the loader applies no relocation to a section it does not load) nor registered
// as the module's unwind table. Relocating and sorting those tables (fuse.ko: about 3000
// entries) cost about 6 ms of each boot under TCG; without them only the kernel's stack traces
// through module code (an oops, a WARN) are less exact. Anything else is returned unchanged.
func HideUnwindTables(ko []byte) []byte {
	f, err := elf.NewFile(bytes.NewReader(ko))
	if err != nil || f.Class != elf.ELFCLASS64 {
		return ko
	}
	const shdrSize = 64 // sizeof(Elf64_Shdr)
	// Elf64_Ehdr: e_shoff at 40, e_shentsize at 58 (elf.NewFile has checked the header's size).
	shoff := f.ByteOrder.Uint64(ko[40:48])
	if f.ByteOrder.Uint16(ko[58:60]) != shdrSize {
		return ko
	}
	var out []byte
	for i, s := range f.Sections {
		if !unwindSections[s.Name] {
			continue
		}
		off := shoff + uint64(i)*shdrSize
		if off+shdrSize > uint64(len(ko)) {
			return ko
		}
		if out == nil {
			out = bytes.Clone(ko)
		}
		h := out[off : off+shdrSize]
		f.ByteOrder.PutUint32(h[0:4], 0) // sh_name: the empty name at offset 0 of the string table
		f.ByteOrder.PutUint64(h[8:16], f.ByteOrder.Uint64(h[8:16])&^uint64(elf.SHF_ALLOC))
	}
	if out == nil {
		return ko
	}
	return out
}

// moduleSigMagic ends a signed module file.
const moduleSigMagic = "~Module signature appended~\n"

// StripSignature removes the appended signature of a kernel module. The guest kernel does not
// enforce signatures (no CONFIG_MODULE_SIG_FORCE, no lockdown), and checking them costs each boot
// a few milliseconds per module under emulation.
func StripSignature(ko []byte) []byte {
	n := len(ko) - len(moduleSigMagic)
	if n < 12 || string(ko[n:]) != moduleSigMagic {
		return ko
	}
	sigLen := int(binary.BigEndian.Uint32(ko[n-4 : n]))
	end := n - 12 - sigLen
	if end <= 0 {
		return ko
	}
	return ko[:end]
}
