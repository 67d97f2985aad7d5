package composefile

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/iii-go/iii/compose/errcode"
	"github.com/iii-go/iii/compose/sandboxadapter"
	"gopkg.in/yaml.v3"
)

// OldSandboxWorker is the 0.25 engine-owned sandbox worker that moved out of engine.workers.
const OldSandboxWorker = "iii-sandbox"

// checkSandboxMoved refuses a 0.25 file that still declares engine.workers.iii-sandbox, printing
// the replacement with the old settings filled in (req B1, B2, B5).
func (p *parser) checkSandboxMoved(root *yaml.Node) error {
	engine := lookupKey(root, "engine")
	if engine == nil || engine.Kind != yaml.MappingNode {
		return nil
	}
	workers := lookupKey(engine, "workers")
	if workers == nil || workers.Kind != yaml.MappingNode {
		return nil
	}
	var key, val *yaml.Node
	entries := 0
	for i := 0; i+1 < len(workers.Content); i += 2 {
		entries++
		if k := workers.Content[i].Value; (k == OldSandboxWorker || strings.HasPrefix(k, OldSandboxWorker+"#")) && key == nil {
			key, val = workers.Content[i], workers.Content[i+1]
		}
	}
	if key == nil {
		return nil
	}
	ns := DefaultNamespace
	if n := lookupKey(root, "namespace"); n != nil && n.Kind == yaml.ScalarNode && ValidNamespace(n.Value) {
		ns = n.Value
	}
	only := entries == 1
	repl, err := SandboxReplacement(val, ns, only)
	if err != nil {
		return errcode.New(errcode.SandboxConfigMoved, "%s:%d: engine.workers.iii-sandbox moved in iii 0.26 to the sandbox-libkrun container; move its keys under containers.sandbox-libkrun.config_override", p.path, key.Line)
	}
	if ctrs := lookupKey(root, "containers"); lookupKey(ctrs, sandboxadapter.Name) != nil {
		return errcode.New(errcode.SandboxConfigMoved,
			"%s:%d: engine.workers.%s moved in iii 0.26, and this file already declares the %s container: move every key of the old block into containers.%s.config_override (same keys, same meanings), then delete engine.workers.%s%s. The block as config_override:\n\n%s",
			p.path, key.Line, key.Value, sandboxadapter.Name, sandboxadapter.Name, key.Value, onlyHint(only), overrideOnly(val))
	}
	var howDelete string
	if only {
		howDelete = "Delete the iii-sandbox entry; it was the only entry under engine.workers, so write `workers: {}` (an empty `workers:` is invalid)."
	} else {
		howDelete = "Delete the iii-sandbox entry from engine.workers and keep the other entries."
	}
	return errcode.New(errcode.SandboxConfigMoved,
		"%s:%d: engine.workers.iii-sandbox moved in iii 0.26. The engine keeps only a router for sandbox::*; sandboxes now run in the %s adapter worker, and its settings live in that container's config_override, with the same keys and meanings. %s Then add engine.sandbox and the %s container, merging this into the file:\n\n%s",
		p.path, key.Line, sandboxadapter.Name, howDelete, sandboxadapter.Name, repl)
}

func onlyHint(only bool) string {
	if only {
		return " (it was the only entry, so write `workers: {}`)"
	}
	return ""
}

// overrideOnly renders the old block under a config_override key.
func overrideOnly(old *yaml.Node) string {
	body := &yaml.Node{Kind: yaml.MappingNode}
	if old != nil && old.Kind == yaml.MappingNode {
		if c, err := copyNode(old); err == nil {
			body = c
			body.Style &^= yaml.FlowStyle
		}
	}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if enc.Encode(&yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{{Kind: yaml.ScalarNode, Tag: "!!str", Value: "config_override"}, body}}) != nil {
		return ""
	}
	enc.Close()
	return b.String()
}

// SandboxReplacement renders the YAML that replaces an engine.workers.iii-sandbox block whose
// value is old: engine.sandbox bound in namespace, and a sandbox-libkrun container whose
// config_override holds every key of old. onlyEntry adds `workers: {}`.
func SandboxReplacement(old *yaml.Node, namespace string, onlyEntry bool) (string, error) {
	str := func(v string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: v} }
	engine := &yaml.Node{Kind: yaml.MappingNode}
	if onlyEntry {
		engine.Content = append(engine.Content, str("workers"), &yaml.Node{Kind: yaml.MappingNode, Style: yaml.FlowStyle})
	}
	engine.Content = append(engine.Content, str("sandbox"), &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{
		str("adapter"), str(sandboxadapter.Name), str("namespace"), str(namespace),
	}})
	version := str(sandboxadapter.CurrentRange())
	version.Style = yaml.SingleQuotedStyle
	ctr := &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{
		str("worker"), str(sandboxadapter.Worker), str("version"), version,
	}}
	if old != nil && old.Kind == yaml.MappingNode && len(old.Content) > 0 {
		override, err := copyNode(old)
		if err != nil {
			return "", err
		}
		override.Style &^= yaml.FlowStyle
		ctr.Content = append(ctr.Content, str("config_override"), override)
	}
	doc := &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{
		str("engine"), engine,
		str("containers"), {Kind: yaml.MappingNode, Content: []*yaml.Node{str(sandboxadapter.Name), ctr}},
	}}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return "", fmt.Errorf("render replacement: %w", err)
	}
	if err := enc.Close(); err != nil {
		return "", err
	}
	return b.String(), nil
}

// lookupKey returns the value of key in mapping n, or nil.
func lookupKey(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// maxCopyNodes bounds copyNode, so an alias bomb in the old block cannot blow up the message.
const maxCopyNodes = 10000

// copyNode deep-copies a node tree, resolving aliases and dropping anchors and positions. It
// fails when the copy would exceed maxCopyNodes nodes.
func copyNode(n *yaml.Node) (*yaml.Node, error) {
	budget := maxCopyNodes
	var cp func(n *yaml.Node, depth int) (*yaml.Node, error)
	cp = func(n *yaml.Node, depth int) (*yaml.Node, error) {
		budget--
		if budget < 0 || depth > 100 {
			return nil, fmt.Errorf("the block is too large or too deeply nested to print")
		}
		if n.Kind == yaml.AliasNode {
			if n.Alias == nil {
				return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}, nil
			}
			return cp(n.Alias, depth+1)
		}
		c := &yaml.Node{Kind: n.Kind, Style: n.Style, Tag: n.Tag, Value: n.Value,
			HeadComment: n.HeadComment, LineComment: n.LineComment, FootComment: n.FootComment}
		for _, k := range n.Content {
			kc, err := cp(k, depth+1)
			if err != nil {
				return nil, err
			}
			c.Content = append(c.Content, kc)
		}
		return c, nil
	}
	return cp(n, 0)
}
