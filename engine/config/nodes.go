package config

import (
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// The YAML node readers every section parser shares.

// mapping calls fn for each key of the mapping v (what names it in errors), refusing a key not
// in allowed; a null node is an empty mapping.
func mapping(v *yaml.Node, what string, allowed []string, fn func(k, v *yaml.Node) error) error {
	if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
		return nil
	}
	if v.Kind != yaml.MappingNode {
		return invalid(v.Line, "%s must be a mapping", what)
	}
	for i := 0; i+1 < len(v.Content); i += 2 {
		k := v.Content[i]
		ok := false
		for _, a := range allowed {
			ok = ok || a == k.Value
		}
		if !ok {
			return invalid(k.Line, "unknown key %q in %s; allowed: %s", k.Value, what, strings.Join(allowed, ", "))
		}
		if err := fn(k, v.Content[i+1]); err != nil {
			return err
		}
	}
	return nil
}

// functionID reads a function id setting: a non-empty string.
func functionID(v *yaml.Node, key string) (string, error) {
	s, err := strValue(v, key)
	if err == nil && strings.TrimSpace(s) == "" {
		err = invalid(v.Line, "%s must name a function", key)
	}
	return s, err
}

func boolValue(v *yaml.Node, key string) (bool, error) {
	if v.Kind == yaml.ScalarNode && v.Tag == "!!bool" {
		return strconv.ParseBool(v.Value)
	}
	if v.Kind == yaml.ScalarNode && (v.Value == "true" || v.Value == "false") { // from ${VAR}
		return v.Value == "true", nil
	}
	return false, invalid(v.Line, "%s must be true or false", key)
}

func strValue(v *yaml.Node, key string) (string, error) {
	if v.Kind != yaml.ScalarNode || v.Tag == "!!null" {
		return "", invalid(v.Line, "%s must be a string", key)
	}
	return v.Value, nil
}

func intValue(v *yaml.Node, key string) (int, error) {
	if v.Kind != yaml.ScalarNode {
		return 0, invalid(v.Line, "%s must be an integer", key)
	}
	n, err := strconv.Atoi(v.Value)
	if err != nil {
		return 0, invalid(v.Line, "%s must be an integer, got %q", key, v.Value)
	}
	return n, nil
}
