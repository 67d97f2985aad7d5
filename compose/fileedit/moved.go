package fileedit

import (
	"strings"

	"github.com/iii-go/iii/compose/composefile"
	"github.com/iii-go/iii/compose/errcode"
	"github.com/iii-go/iii/compose/sandboxadapter"
	"gopkg.in/yaml.v3"
)

// MoveSandboxConfig applies the replacement that SANDBOX_CONFIG_MOVED prints (req B1, B2, B5):
// it deletes engine.workers.iii-sandbox (writing `workers: {}` when it was the only entry), adds
// engine.sandbox when the file has none, and adds the sandbox-libkrun container at the current
// range with the old block's keys under config_override. The replacement is rendered by
// composefile.SandboxReplacement, the same text the error shows. It refuses a file that already
// declares the adapter container, where merging the keys is the user's call. It reports whether
// there was a block to move.
func (d *Doc) MoveSandboxConfig() (bool, error) {
	moved := false
	err := d.apply(func(root *yaml.Node) error {
		engine, _ := get(root, "engine")
		workers, _ := get(engine, "workers")
		if workers == nil || workers.Kind != yaml.MappingNode {
			return nil
		}
		at := -1
		for i := 0; i+1 < len(workers.Content); i += 2 {
			if k := workers.Content[i].Value; k == composefile.OldSandboxWorker || strings.HasPrefix(k, composefile.OldSandboxWorker+"#") {
				at = i
				break
			}
		}
		if at < 0 {
			return nil
		}
		if declaresAdapter(root) {
			return errcode.New(errcode.SandboxConfigMoved, "%s already declares the %s container: move the keys of engine.workers.%s into its config_override by hand", d.Path, sandboxadapter.Name, workers.Content[at].Value)
		}
		oldKey, old := workers.Content[at], workers.Content[at+1]
		ns := composefile.DefaultNamespace
		if n, _ := get(root, "namespace"); n != nil && n.Kind == yaml.ScalarNode && composefile.ValidNamespace(n.Value) {
			ns = n.Value
		}
		only := len(workers.Content) == 2
		text, err := composefile.SandboxReplacement(old, ns, only)
		if err != nil {
			return errcode.New(errcode.SandboxConfigMoved, "%s: %w", d.Path, err)
		}
		var repl yaml.Node
		if err := yaml.Unmarshal([]byte(text), &repl); err != nil {
			return errcode.New(errcode.SandboxConfigMoved, "%s: the replacement does not parse: %w", d.Path, err)
		}
		replEngine, _ := get(repl.Content[0], "engine")
		replCtrs, _ := get(repl.Content[0], "containers")
		workers.Content = append(workers.Content[:at:at], workers.Content[at+2:]...)
		if only {
			w, _ := get(replEngine, "workers")
			w.HeadComment, w.LineComment, w.FootComment = workers.HeadComment, workers.LineComment, workers.FootComment
			setKey(engine, "workers", w)
		}
		if s, _ := get(engine, "sandbox"); s == nil {
			s, _ = get(replEngine, "sandbox")
			engine.Content = append(engine.Content, str("sandbox"), s)
		}
		ctrs := containers(root, true)
		if ctrs.Kind != yaml.MappingNode {
			return errcode.New(errcode.InvalidComposeFile, "%s is not valid compose YAML: containers must be a mapping", d.Path)
		}
		if len(ctrs.Content) == 0 {
			ctrs.Style = 0
		}
		key := str(sandboxadapter.Name)
		key.HeadComment, key.LineComment = oldKey.HeadComment, oldKey.LineComment
		ctr, _ := get(replCtrs, sandboxadapter.Name)
		// A comment on the old block's own line (`iii-sandbox: {...} # note`) would be dropped
		// with the flow style; it goes on config_override, which now holds that block.
		if _, i := get(ctr, "config_override"); i >= 0 && old.LineComment != "" {
			ctr.Content[i].LineComment = old.LineComment
		}
		ctrs.Content = append(ctrs.Content, key, ctr)
		moved = true
		return nil
	}, nil)
	return moved, err
}

// declaresAdapter reports whether root declares a container keyed sandbox-libkrun or running the
// sandbox-libkrun package.
func declaresAdapter(root *yaml.Node) bool {
	ctrs := containers(root, false)
	if v, _ := get(ctrs, sandboxadapter.Name); v != nil {
		return true
	}
	if ctrs == nil || ctrs.Kind != yaml.MappingNode {
		return false
	}
	for i := 1; i < len(ctrs.Content); i += 2 {
		w, _ := get(ctrs.Content[i], "worker")
		if w != nil && strings.HasPrefix(w.Value, "package://") && w.Value[strings.LastIndexByte(w.Value, '/')+1:] == sandboxadapter.Name {
			return true
		}
	}
	return false
}

// setKey replaces the value of key in mapping m.
func setKey(m *yaml.Node, key string, v *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content[i+1] = v
			return
		}
	}
}

// MoveSandboxConfig loads path, applies the SANDBOX_CONFIG_MOVED replacement and writes the file
// atomically when there was a block to move. It returns the bytes before and after.
func MoveSandboxConfig(path string) (before, after []byte, moved bool, err error) {
	d, err := Load(path)
	if err != nil {
		return nil, nil, false, err
	}
	if moved, err = d.MoveSandboxConfig(); err != nil || !moved {
		return d.Orig, d.Orig, false, err
	}
	after, err = d.Write()
	return d.Orig, after, err == nil, err
}
