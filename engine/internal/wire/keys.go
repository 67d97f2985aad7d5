package wire

// ObjectKeys calls fn with each top-level key of the JSON object b, unescaped, in order
// (duplicates too), without decoding the values: what a reader of a few keys of a large reply
// needs. It reports false when b is not exactly one valid JSON object; fn may then have been
// called for the keys before the fault.
func ObjectKeys(b []byte, fn func(key string)) bool {
	return ObjectMembers(b, func(k string, _ byte) { fn(k) })
}

// ObjectMembers is ObjectKeys that also gives the first byte of each key's value ('{' for an
// object, '"' for a string, 't' for true ...): enough to tell the kind of a value without
// decoding it.
func ObjectMembers(b []byte, fn func(key string, first byte)) bool {
	p := parser{b: b}
	p.ws()
	if !p.eat('{') {
		return false
	}
	err := p.elements('}', func() error {
		k, err := p.str()
		if err != nil {
			return err
		}
		if err := p.colon(); err != nil {
			return err
		}
		if p.i >= len(p.b) {
			return p.fail("unexpected end")
		}
		fn(k, p.b[p.i])
		return p.skip(1)
	})
	return err == nil && p.end() == nil
}
