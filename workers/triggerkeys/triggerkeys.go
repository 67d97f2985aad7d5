// Package triggerkeys checks the keys of a trigger's config as iii treats them. A key the
// worker implements is read by the worker; description, which iii's documentation and its
// SDK's tests pass on triggers, is kept in the trigger's config (engine::registered-triggers::list
// shows it) and changes nothing in delivery; any other key refuses the trigger with
// TRIGGER_CONFIG_UNSUPPORTED naming it, since it may be a setting this project does not
// implement (or a misspelt one), and ignoring it would change what the trigger does unseen.
package triggerkeys

import (
	"encoding/json"
	"sort"
	"strings"

	"github.com/iii-go/iii/engine/protocol"
)

// Code refuses a trigger whose config has a key the worker does not implement.
const Code = "TRIGGER_CONFIG_UNSUPPORTED"

// Descriptive are the keys iii documents as describing a trigger, kept without effect.
var Descriptive = []string{"description"}

// Check refuses the first key (in name order) of config that is neither one of keys nor
// descriptive; kind names the trigger type in the message. A config that is not a JSON
// object passes: the worker's own decoding says what is wrong with it.
func Check(kind string, config json.RawMessage, keys ...string) error {
	var m map[string]json.RawMessage
	if json.Unmarshal(config, &m) != nil {
		return nil
	}
	var unknown []string
	for k := range m {
		if !contains(keys, k) && !contains(Descriptive, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	sort.Strings(unknown)
	return protocol.NewError(Code, "%s trigger config: unknown key %q (the keys are %s, and %s kept as a description); "+
		"the trigger is refused rather than the key ignored", kind, unknown[0], strings.Join(keys, ", "), strings.Join(Descriptive, ", "))
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
