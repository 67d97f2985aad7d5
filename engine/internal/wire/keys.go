package wire

// ObjectKeys calls fn with each top-level key of the JSON object b, unescaped, in order
// (duplicates too), without decoding the values: what a reader of a few keys of a large reply
// needs. It reports false when b is not exactly one valid JSON object; fn may then have been
// called for the keys before the fault.
func ObjectKeys(b []byte, fn func(key string)) bool {
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
		fn(k)
		return p.skip(1)
	})
	return err == nil && p.end() == nil
}
