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
