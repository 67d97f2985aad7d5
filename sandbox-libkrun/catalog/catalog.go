// Package catalog resolves sandbox image names: the built-in presets plus the operator's
// custom_images, gated by the image allowlist (an empty allowlist denies every image).
package catalog

import (
	"sort"

	"github.com/iii-go/iii/engine/sandbox/scode"
	"github.com/iii-go/iii/sandbox-libkrun/settings"
)

// Kinds of catalog entries.
const (
	KindPreset = "preset"
	KindCustom = "custom"
)

// Image is one catalog entry as catalog::list shows it.
type Image struct {
	Name   string `json:"name"`
	OCIRef string `json:"oci_ref"`
	Kind   string `json:"kind"`
}

// Catalog is the set of images and the allowlist of one settings value.
type Catalog struct {
	images []Image
	allow  map[string]bool
}

// New builds the catalog of s.
func New(s settings.Settings) *Catalog {
	c := &Catalog{allow: map[string]bool{}}
	for _, p := range settings.Presets {
		c.images = append(c.images, Image{Name: p.Name, OCIRef: p.OCIRef, Kind: KindPreset})
	}
	var custom []Image
	for name, ref := range s.CustomImages {
		if settings.IsPreset(name) {
			continue // presets always win; settings validation rejects this anyway
		}
		custom = append(custom, Image{Name: name, OCIRef: ref, Kind: KindCustom})
	}
	sort.Slice(custom, func(i, j int) bool { return custom[i].Name < custom[j].Name })
	c.images = append(c.images, custom...)
	for _, name := range s.ImageAllowlist {
		c.allow[name] = true
	}
	return c
}

// List returns every entry: presets first in their stable order, then custom images by name.
// It lists the catalog, not the allowlist.
func (c *Catalog) List() []Image { return append([]Image(nil), c.images...) }

// Lookup returns the entry of name if it is in the catalog and allowlisted, else S100: one code
// for both cases, each with its own message so the user knows which list to edit.
func (c *Catalog) Lookup(name string) (Image, error) {
	for _, img := range c.images {
		if img.Name == name {
			if !c.allow[name] {
				return Image{}, scode.ImageNotAllowlisted(name)
			}
			return img, nil
		}
	}
	return Image{}, scode.ImageNotAllowed(name)
}
