package sandboxadapter

import "testing"

func TestAliasPinsContractRange(t *testing.T) {
	pkg, rng, alias := Resolve(Alias)
	if pkg != Name || rng != "^0.3" || !alias {
		t.Fatalf("Resolve(%q) = %s %s %v", Alias, pkg, rng, alias)
	}
	if pkg, rng, alias := Resolve("state"); pkg != "state" || rng != "" || alias {
		t.Fatalf("Resolve(state) = %s %s %v", pkg, rng, alias)
	}
	if _, err := Range(2); err == nil {
		t.Fatal("contract 2 has no adapter release yet")
	}
}

// A bare compose::update rewrites only a range that admits no 0.3.1 or later (req B8).
func TestAdmitsCurrent(t *testing.T) {
	for r, want := range map[string]bool{
		"^0.3": true, "~0.3.0": true, ">=0.3.1": true, "0.3.1": true, "^0.3.2": true, "0.3.7": true,
		">=0.3.0 <0.3.20": true, "0.3.x": true, "*": true, "latest": true,
		"^0.2": false, "~0.2.3": false, "0.2.2": false, "0.3.0": false, "<0.3.1": false, ">=0.4.0": false, "^1": false,
	} {
		if got := AdmitsCurrent(r); got != want {
			t.Errorf("AdmitsCurrent(%q) = %v, want %v", r, got, want)
		}
	}
}
