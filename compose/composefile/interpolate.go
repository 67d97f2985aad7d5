package composefile

import (
	"strings"

	"github.com/iii-go/iii/compose/errcode"
)

// Lookup returns the value of an environment variable and whether it is set.
type Lookup func(name string) (string, bool)

// Expand interpolates s the way a compose file does: ${VAR} (unset is UNDEFINED_VARIABLE),
// ${VAR:-text} (text when VAR is unset or empty), $${VAR} for a literal ${VAR}; a bare $VAR is
// left untouched. The returned error carries its code and describes the reference; the caller
// adds where it was found.
func Expand(s string, lookup Lookup) (string, error) {
	if !strings.Contains(s, "$") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		c := s[i]
		if c != '$' {
			b.WriteByte(c)
			i++
			continue
		}
		if strings.HasPrefix(s[i:], "$${") {
			b.WriteString("${")
			i += 3
			continue
		}
		if !strings.HasPrefix(s[i:], "${") {
			b.WriteByte(c)
			i++
			continue
		}
		end := strings.IndexByte(s[i+2:], '}')
		if end < 0 {
			return "", errcode.New(errcode.UnterminatedReference, "%q opens ${ without a closing }", s)
		}
		body := s[i+2 : i+2+end]
		name, def, hasDef := strings.Cut(body, ":-")
		if !validVarName(name) {
			return "", errcode.New(errcode.InvalidReference, "${%s} is not a valid reference: write ${NAME} or ${NAME:-default}, NAME made of letters, digits and _", body)
		}
		v, ok := lookup(name)
		switch {
		case hasDef && (!ok || v == ""):
			v = def
		case !ok:
			return "", errcode.New(errcode.UndefinedVariable, "${%s} is not set; set %s or write ${%s:-default}", name, name, name)
		}
		b.WriteString(v)
		i += 2 + end + 1
	}
	return b.String(), nil
}

func validVarName(n string) bool {
	if n == "" {
		return false
	}
	for i, r := range n {
		switch {
		case r == '_', r >= 'A' && r <= 'Z', r >= 'a' && r <= 'z':
		case r >= '0' && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// expandAt interpolates a scalar and, on failure, names the file, line and key.
func (p *parser) expandAt(n nodeRef, s string) (string, error) {
	v, err := Expand(s, p.lookup)
	if err != nil {
		e := errcode.As(err, errcode.InvalidReference)
		return "", errcode.New(e.Code, "%s:%d: %s: %s", p.path, n.node.Line, n.where, e.Message)
	}
	return v, nil
}
