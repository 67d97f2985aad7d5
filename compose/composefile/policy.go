package composefile

import (
	"slices"

	"gopkg.in/yaml.v3"
)

// Restart policies of a container (restart:).
const (
	// RestartNo never restarts the container: a worker that exits stays failed.
	RestartNo = "no"
	// RestartOnFailure restarts a worker that exits unexpectedly (a non-zero status or a signal).
	RestartOnFailure = "on-failure"
	// RestartAlways restarts a worker that exits for any reason other than a stop Compose asked for.
	RestartAlways = "always"
)

// RestartPolicies lists the values restart: takes.
var RestartPolicies = []string{RestartNo, RestartOnFailure, RestartAlways}

// policy reads restart: (no, on-failure or always) and required: (true or false).
func (p *parser) policy(ct *Container, k pair) error {
	v := k.val
	if v.Kind != yaml.ScalarNode || isNull(v) {
		return p.invalid(v, "%s must be a single value", k.where)
	}
	if k.key == "restart" {
		// YAML 1.1 readers take an unquoted no for false; both spellings mean the policy "no".
		if v.Value == "false" && v.ShortTag() == "!!bool" {
			ct.Restart = RestartNo
			return nil
		}
		if !slices.Contains(RestartPolicies, v.Value) {
			return p.invalid(v, "%s: %q is not a restart policy; write no, on-failure or always", k.where, v.Value)
		}
		ct.Restart = v.Value
		return nil
	}
	switch {
	case v.ShortTag() == "!!bool" && v.Value == "true":
		ct.Required = true
	case v.ShortTag() == "!!bool" && v.Value == "false":
		ct.Required = false
	default:
		return p.invalid(v, "%s must be true or false", k.where)
	}
	return nil
}
