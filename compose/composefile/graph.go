package composefile

import (
	"strings"

	"github.com/iii-go/iii/compose/errcode"
)

func (p *parser) checkGraph(f *File) error {
	for _, key := range f.Order {
		c := f.Containers[key]
		for _, dep := range c.StartAfter {
			if dep == key {
				return errcode.New(errcode.SelfDependency, "%s:%d: containers.%s.start_after lists %s itself", p.path, c.Line, key, key)
			}
			if _, ok := f.Containers[dep]; !ok {
				return errcode.New(errcode.UnknownDependency, "%s:%d: containers.%s.start_after names %q, which is not a container in this file (containers: %s)", p.path, c.Line, key, dep, strings.Join(f.Order, ", "))
			}
		}
	}
	const (
		unvisited = iota
		active
		done
	)
	state := map[string]int{}
	var stack []string
	var visit func(string) []string
	visit = func(k string) []string {
		state[k] = active
		stack = append(stack, k)
		for _, dep := range f.Containers[k].StartAfter {
			switch state[dep] {
			case active:
				i := 0
				for stack[i] != dep {
					i++
				}
				return append(append([]string{}, stack[i:]...), dep)
			case unvisited:
				if cyc := visit(dep); cyc != nil {
					return cyc
				}
			}
		}
		stack = stack[:len(stack)-1]
		state[k] = done
		return nil
	}
	for _, key := range f.Order {
		if state[key] == unvisited {
			if cyc := visit(key); cyc != nil {
				c := f.Containers[cyc[0]]
				return errcode.New(errcode.DependencyCycle, "%s:%d: containers.%s.start_after forms a cycle: %s", p.path, c.Line, cyc[0], strings.Join(cyc, " -> "))
			}
		}
	}
	return nil
}

// StartOrder returns the container keys so that each comes after everything in its
// start_after, ties broken by file order.
func (f *File) StartOrder() []string {
	placed := map[string]bool{}
	var out []string
	for len(out) < len(f.Order) {
		progress := false
		for _, k := range f.Order {
			if placed[k] {
				continue
			}
			ready := true
			for _, d := range f.Containers[k].StartAfter {
				if !placed[d] {
					ready = false
					break
				}
			}
			if ready {
				placed[k] = true
				out = append(out, k)
				progress = true
			}
		}
		if !progress {
			break
		}
	}
	return out
}
