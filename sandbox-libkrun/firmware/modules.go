package firmware

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io/fs"
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
