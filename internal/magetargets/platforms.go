package magetargets

import (
	"slices"
	"strings"

	"github.com/iii-go/iii/internal/release"
)

// osArch is one GOOS/GOARCH pair.
type osArch struct{ GOOS, GOARCH string }

// platforms lists the GOOS/GOARCH pairs module m ships for, in release.Targets order: those of
// the products whose package lies in m, or, for a module that holds no product (engine,
// compose, updater are libraries of iii), those of iii.
func platforms(m string) []osArch {
	var names []string
	for _, p := range release.Products {
		if moduleOf(p.Package) == m {
			names = append(names, p.Name)
		}
	}
	if len(names) == 0 {
		names = []string{"iii"}
	}
	var out []osArch
	for _, t := range release.Targets {
		pl := osArch{t.GOOS, t.GOARCH}
		if slices.ContainsFunc(names, t.Ships) && !slices.Contains(out, pl) {
			out = append(out, pl)
		}
	}
	return out
}

// moduleOf names the module of modules that holds pkg, a package path relative to the
// repository root ("./workers/cmd/http"): the longest module directory it lies under, else ".".
func moduleOf(pkg string) string {
	pkg = strings.TrimPrefix(pkg, "./")
	best := "."
	for _, m := range modules {
		if m != "." && (pkg == m || strings.HasPrefix(pkg, m+"/")) && len(m) > len(best) {
			best = m
		}
	}
	return best
}
