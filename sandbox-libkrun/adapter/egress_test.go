package adapter

import (
	"encoding/json"
	"testing"

	"github.com/iii-go/iii/engine/sandbox/scode"
	"github.com/iii-go/iii/sandbox-libkrun/settings"
	"github.com/iii-go/iii/sandbox-libkrun/vm"
)

// TestCreateNetwork: create and run take network as off, on or a policy; the policy reaches the
// machine's spec, list shows each sandbox's mode, a malformed value or entry is S001 naming it.
func TestCreateNetwork(t *testing.T) {
	h := newHarness(t, nil, nil)
	for body, mode := range map[string]string{
		`{"image":"python"}`:                                        "off",
		`{"image":"python","network":false}`:                        "off",
		`{"image":"python","network":"off"}`:                        "off",
		`{"image":"python","network":true}`:                         "on",
		`{"image":"python","network":"on"}`:                         "on",
		`{"image":"python","network":{"allow":["192.0.2.2:8080"]}}`: "policy",
	} {
		id := h.create(t, body)
		got := ""
		for _, r := range h.mustCall(t, "list", `{}`)["sandboxes"].([]any) {
			if row := r.(map[string]any); row["sandbox_id"] == id {
				got, _ = row["network"].(string)
			}
		}
		if got != mode {
			t.Errorf("%s: list shows network %q, want %q", body, got, mode)
		}
	}
	last := h.drv.specs[len(h.drv.specs)-1]
	for _, s := range h.drv.specs {
		if len(s.Egress) > 0 {
			last = s
		}
	}
	if !last.Network || len(last.Egress) != 1 || last.Egress[0].Allow[0].Text != "192.0.2.2:8080" {
		t.Fatalf("the policy did not reach the machine: %+v", last)
	}
	for body, want := range map[string]string{
		`{"image":"python","network":"yes"}`:                           `network: "yes" is not a network mode`,
		`{"image":"python","network":1}`:                               `network: must be`,
		`{"image":"python","network":{"allow":["a.com"],"ports":[1]}}`: `network.ports: unknown key`,
		`{"image":"python","network":{"deny":["a.com:99999"]}}`:        `network.deny[0]: entry "a.com:99999"`,
	} {
		_, e := h.call(t, "create", body)
		wantCode(t, e, scode.S001, want)
	}
	_, e := h.call(t, "run", `{"image":"python","code":"1","lang":"python","network":{"allow":["bad entry"]}}`)
	wantCode(t, e, scode.S001, `network.allow[0]: entry "bad entry"`)
	n := len(h.drv.specs)
	h.mustCall(t, "run", `{"image":"python","code":"1","lang":"python","network":{"deny":["10.0.0.0/8"]}}`)
	if s := h.drv.specs[n]; !s.Network || len(s.Egress) != 1 || s.Egress[0].Deny[0].Text != "10.0.0.0/8" {
		t.Fatalf("run's policy did not reach the machine: %+v", s)
	}
}

// TestPerImageNetworkCeiling: an image set off refuses a network (S400) but not a create without
// one; an image with a policy holds every networked sandbox of it to that policy beside the
// creator's, "on" included; other images are unaffected.
func TestPerImageNetworkCeiling(t *testing.T) {
	img := &vm.Egress{}
	r, err := vm.ParseEgressRule("*.pypi.org:443")
	if err != nil {
		t.Fatal(err)
	}
	img.Allow = []vm.EgressRule{r}
	h := newHarness(t, func(s *settings.Settings) {
		s.PerImageNetwork = map[string]settings.ImageNetwork{"node": {On: false}, "python": {On: true, Egress: img}}
	}, nil)
	_, e := h.call(t, "create", `{"image":"node","network":true}`)
	wantCode(t, e, scode.S400, "per_image_network.node is off")
	_, e = h.call(t, "create", `{"image":"node","network":{"allow":[":443"]}}`)
	wantCode(t, e, scode.S400, "per_image_network.node is off")
	h.create(t, `{"image":"node"}`)
	h.create(t, `{"image":"python","network":"on"}`)
	if s := h.drv.specs[len(h.drv.specs)-1]; len(s.Egress) != 1 || s.Egress[0] != img {
		t.Fatalf("on under the image's policy: %+v", s.Egress)
	}
	h.create(t, `{"image":"python","network":{"deny":["evil.pypi.org"]}}`)
	if s := h.drv.specs[len(h.drv.specs)-1]; len(s.Egress) != 2 || s.Egress[0] != img || s.Egress[1].Deny[0].Text != "evil.pypi.org" {
		t.Fatalf("the image's and the creator's policy: %+v", s.Egress)
	}
	b, _ := json.Marshal(h.mustCall(t, "adapter::info", `{}`)["per_image_network"])
	if string(b) != `{"node":"off","python":{"allow":["*.pypi.org:443"],"deny":[]}}` {
		t.Errorf("adapter::info shows per_image_network %s", b)
	}
	for _, row := range h.mustCall(t, "list", `{}`)["sandboxes"].([]any) {
		m := row.(map[string]any)
		if want := map[string]string{"node": "off", "python": "policy"}[m["image"].(string)]; m["network"] != want {
			t.Errorf("%v: network %v, want %s", m["image"], m["network"], want)
		}
	}
}
