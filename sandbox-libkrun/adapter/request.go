package adapter

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"github.com/iii-go/iii/engine/sandbox/scode"
)

// decode reads a request object into v. A literal null, a non-object, a field of the wrong type
// or an unknown field is S001 naming it: a misspelt field (`netwrok`) is refused rather than
// ignored, as the settings files refuse an unknown key.
func decode(raw json.RawMessage, v any) error {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 {
		trimmed = []byte("{}")
	}
	if trimmed[0] != '{' {
		return scode.Invalid("the request must be a JSON object, got " + shortJSON(trimmed))
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return scode.Invalid(fmt.Sprintf("field `%s` must be %s, got %s", te.Field, goTypeName(te.Type.String()), te.Value))
		}
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return scode.Invalid(fmt.Sprintf("unknown field %s; the accepted fields are %s", f, strings.Join(fieldNames(v), ", ")))
		}
		return scode.Invalid(err.Error())
	}
	return nil
}

// fieldNames lists the JSON names of the fields of the struct v points to.
func fieldNames(v any) []string {
	t := reflect.TypeOf(v)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	var out []string
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			out = append(out, "`"+name+"`")
		}
	}
	if len(out) == 0 {
		return []string{"none"}
	}
	return out
}

func goTypeName(t string) string {
	switch {
	case strings.Contains(t, "uint"):
		return "a non-negative integer"
	case strings.Contains(t, "int"):
		return "an integer"
	case t == "string" || t == "*string":
		return "a string"
	case strings.Contains(t, "bool"):
		return "a boolean"
	case strings.HasPrefix(t, "[]"):
		return "a list"
	}
	return t
}

func shortJSON(b []byte) string {
	if len(b) > 40 {
		return string(b[:40]) + "…"
	}
	return string(b)
}

var uuidRe = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// checkID validates a sandbox id and returns it in canonical lower-case form.
func checkID(id string) (string, error) {
	if id == "" {
		return "", scode.Invalid("sandbox_id is required")
	}
	if !uuidRe.MatchString(id) {
		return "", scode.Invalid("sandbox_id is not a valid UUID: " + id)
	}
	return strings.ToLower(id), nil
}

var envNameRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// parseEnv accepts ["K=V", ...] or {"K": "V"} (map keys sorted) and returns K=V entries.
func parseEnv(raw json.RawMessage) ([]string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var bad []string
	var out []string
	switch raw[0] {
	case '[':
		var list []string
		if err := json.Unmarshal(raw, &list); err != nil {
			return nil, scode.Invalid("env must be a list of \"K=V\" strings or a map of names to string values")
		}
		for _, kv := range list {
			name, _, ok := strings.Cut(kv, "=")
			if !ok || !envNameRe.MatchString(name) {
				bad = append(bad, kv)
				continue
			}
			out = append(out, kv)
		}
	case '{':
		var m map[string]string
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, scode.Invalid("env must be a list of \"K=V\" strings or a map of names to string values")
		}
		keys := slices.Sorted(maps.Keys(m))
		for _, k := range keys {
			if !envNameRe.MatchString(k) {
				bad = append(bad, k)
				continue
			}
			out = append(out, k+"="+m[k])
		}
	default:
		return nil, scode.Invalid("env must be a list of \"K=V\" strings or a map of names to string values")
	}
	if len(bad) > 0 {
		q := make([]string, len(bad))
		for i, b := range bad {
			q[i] = fmt.Sprintf("%q", b)
		}
		return nil, scode.Invalid("env contains invalid variable name(s): [" + strings.Join(q, ", ") +
			"]. Names must match `[A-Za-z_][A-Za-z0-9_]*` (list entries are \"NAME=value\").")
	}
	return out, nil
}

// parseStdin decodes optional base64 stdin.
func parseStdin(s *string) ([]byte, error) {
	if s == nil {
		return nil, nil
	}
	b, err := base64.StdEncoding.DecodeString(*s)
	if err != nil {
		return nil, scode.Invalid("stdin must be base64: " + err.Error())
	}
	return b, nil
}

// resolveArgv picks the argv from the three accepted shapes: argv (wins, alone), a cmd with
// whitespace and no args (shlex-split), or cmd plus args.
func resolveArgv(cmd string, args, argv []string) ([]string, error) {
	if len(argv) > 0 {
		if cmd != "" || len(args) > 0 {
			return nil, scode.Invalid(fmt.Sprintf("`argv` cannot be combined with `cmd` or `args`. Pick one shape. Got argv=%q, cmd=%q, args=%q", argv, cmd, args))
		}
		if argv[0] == "" {
			return nil, scode.Invalid("cmd is required and must be non-empty (or pass `argv` with at least one element)")
		}
		return argv, nil
	}
	if strings.ContainsFunc(cmd, func(r rune) bool { return r == ' ' || r == '\t' || r == '\n' || r == '\r' || r == '\v' || r == '\f' }) {
		if len(args) > 0 {
			return nil, scode.Invalid(fmt.Sprintf("cmd contains whitespace (shell-line shape) AND `args` is set; that is ambiguous. Either remove whitespace from cmd and pass arguments via `args`, or leave `args` empty so cmd is shlex-split. Got cmd=%q, args=%q", cmd, args))
		}
		parts, err := shlexSplit(cmd)
		if err != nil {
			return nil, scode.Invalid(fmt.Sprintf("cmd has unbalanced quotes and cannot be shlex-split: %q. Use `argv: [...]` for argv arrays with embedded quotes.", cmd))
		}
		if len(parts) == 0 {
			return nil, scode.Invalid("cmd is required and must be non-empty (or pass `argv` with at least one element)")
		}
		return parts, nil
	}
	if cmd == "" {
		return nil, scode.Invalid("cmd is required and must be non-empty (or pass `argv` with at least one element)")
	}
	return append([]string{cmd}, args...), nil
}
