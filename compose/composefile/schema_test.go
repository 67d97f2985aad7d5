package composefile

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"gopkg.in/yaml.v3"

	"github.com/iii-go/iii/compose/errcode"
)

// parserOnly are the codes of checks the JSON Schema cannot make (its $comment lists them): the
// schema may accept a file the parser refuses with one of these.
var parserOnly = map[string]bool{
	errcode.UndefinedVariable: true, errcode.InvalidReference: true, errcode.UnterminatedReference: true,
	errcode.UnknownDependency: true, errcode.SelfDependency: true, errcode.DependencyCycle: true,
	errcode.ComposeFileTooLarge: true, errcode.ConfigUnsupported: true,
}

// parserOnlyMessages are INVALID_COMPOSE_FILE rejections that are YAML-level, not schema-level.
var parserOnlyMessages = []string{"anchors and aliases", "exactly one YAML document", "excessive aliasing"}

// parserOnlyRejection reports whether the parser's refusal of data is one the schema cannot
// make: a parserOnly code, a YAML-level refusal, or any refusal of a file that uses ${VAR}, whose
// values the parser checks after interpolation (the schema's $comment says so) and the schema
// sees only as written.
func parserOnlyRejection(e *errcode.Error, data []byte) bool {
	return parserOnly[e.Code] || containsAny(e.Message, parserOnlyMessages) || bytes.Contains(data, []byte("${"))
}

func compileSchema(t testing.TB) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(Schema()))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("worker-compose.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("worker-compose.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// schemaAccepts reports whether the YAML document data validates against s.
func schemaAccepts(s *jsonschema.Schema, data []byte) (bool, string) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return false, "yaml: " + err.Error()
	}
	v, err := jsonValue(&doc)
	if err != nil {
		return false, "yaml: " + err.Error()
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return false, "json: " + err.Error()
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return false, err.Error()
	}
	if err := s.Validate(inst); err != nil {
		return false, err.Error()
	}
	return true, ""
}

// jsonValue is the JSON value an editor's YAML schema check sees for n: a mapping's keys as
// written (0 is the key "0"), scalars with their YAML types.
func jsonValue(n *yaml.Node) (any, error) {
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil, nil
		}
		return jsonValue(n.Content[0])
	case yaml.AliasNode:
		return jsonValue(n.Alias)
	case yaml.MappingNode:
		m := map[string]any{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			v, err := jsonValue(n.Content[i+1])
			if err != nil {
				return nil, err
			}
			if kn := n.Content[i]; kn.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("line %d: a key that is not a scalar has no JSON form", kn.Line)
			}
			k := n.Content[i].Value
			if _, dup := m[k]; dup {
				return nil, fmt.Errorf("line %d: duplicate key %q", n.Content[i].Line, k)
			}
			m[k] = v
		}
		return m, nil
	case yaml.SequenceNode:
		l := []any{}
		for _, c := range n.Content {
			v, err := jsonValue(c)
			if err != nil {
				return nil, err
			}
			l = append(l, v)
		}
		return l, nil
	}
	var v any
	err := n.Decode(&v)
	return v, err
}

type sample struct{ name, text string }

// samples gathers every compose file of the tests: the scenarios' (txtar sections of the
// compose, composerun, doctor and demo folders that are not worker manifests or engine and
// adapter configs), the fixtures', the example, and the parser tests' rejections.
func samples(t testing.TB) []sample {
	t.Helper()
	var out []sample
	root := filepath.Join("..", "..")
	for _, dir := range []string{"compose", "composerun", "doctor", "demo"} {
		files, _ := filepath.Glob(filepath.Join(root, "testscripts", dir, "*.txtar"))
		for _, file := range files {
			b, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			for name, text := range txtarFiles(string(b)) {
				base := filepath.Base(name)
				if !strings.HasSuffix(base, ".yaml") || base == ManifestName || strings.Contains(base, "config") || base == "cfg.yaml" || base == "settings.yaml" {
					continue
				}
				out = append(out, sample{filepath.Base(file) + ":" + name, text})
			}
		}
	}
	fixtures, _ := filepath.Glob(filepath.Join(root, "fixtures", "*", "worker-compose.yaml"))
	for _, f := range fixtures {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, sample{f, string(b)})
	}
	out = append(out, sample{"example.yaml", Example})
	for _, r := range rejections {
		out = append(out, sample{"parse_test: " + r.name, r.yaml})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// txtarFiles splits a txtar archive into its files.
func txtarFiles(s string) map[string]string {
	out := map[string]string{}
	name := ""
	var b strings.Builder
	flush := func() {
		if name != "" {
			out[name] = b.String()
		}
		b.Reset()
	}
	for _, line := range strings.SplitAfter(s, "\n") {
		l := strings.TrimRight(line, "\n")
		if strings.HasPrefix(l, "-- ") && strings.HasSuffix(l, " --") && len(l) > 6 {
			flush()
			name = strings.TrimSpace(l[3 : len(l)-3])
			continue
		}
		if name != "" {
			b.WriteString(line)
		}
	}
	flush()
	return out
}

// TestSchemaAgreesWithParser proves the JSON Schema compose::schema returns accepts every
// compose file of the tests the parser accepts, and rejects every one it rejects, except for
// the checks only the parser makes (parserOnly).
func TestSchemaAgreesWithParser(t *testing.T) {
	s := compileSchema(t)
	any := func(string) (string, bool) { return "49134", true } // every ${VAR} is set
	accepted, rejected, parserOnlyN := 0, 0, 0
	for _, smp := range samples(t) {
		_, perr := Parse("/proj/worker-compose.yaml", []byte(smp.text), any)
		ok, why := schemaAccepts(s, []byte(smp.text))
		switch {
		case perr == nil:
			accepted++
			if !ok {
				t.Errorf("%s: the parser accepts it, the schema does not: %s\n%s", smp.name, why, smp.text)
			}
		default:
			e := errcode.As(perr, "")
			if parserOnlyRejection(e, []byte(smp.text)) {
				parserOnlyN++
				continue
			}
			rejected++
			if ok {
				t.Errorf("%s: the parser rejects it (%s: %s), the schema accepts it\n%s", smp.name, e.Code, e.Message, smp.text)
			}
		}
	}
	t.Logf("%d files accepted by both, %d rejected by both, %d rejected by checks beyond the schema", accepted, rejected, parserOnlyN)
	if accepted < 20 || rejected < 20 {
		t.Fatalf("too few samples: %d accepted, %d rejected", accepted, rejected)
	}
}

// FuzzParseAgreesWithSchema is TestSchemaAgreesWithParser on generated files, seeded with its
// samples: a file the parser accepts the schema accepts, and one the parser refuses with a check
// the schema can make the schema refuses.
func FuzzParseAgreesWithSchema(f *testing.F) {
	for _, smp := range samples(f) {
		f.Add([]byte(smp.text))
	}
	s := compileSchema(f)
	any := func(string) (string, bool) { return "49134", true }
	f.Fuzz(func(t *testing.T, data []byte) {
		_, perr := Parse("/proj/worker-compose.yaml", data, any)
		ok, why := schemaAccepts(s, data)
		if perr == nil {
			if !ok {
				t.Fatalf("the parser accepts it, the schema does not: %s\n%q", why, data)
			}
			return
		}
		e := errcode.As(perr, "")
		if !parserOnlyRejection(e, data) && ok {
			t.Fatalf("the parser rejects it (%s: %s), the schema accepts it\n%q", e.Code, e.Message, data)
		}
	})
}

func containsAny(s string, subs []string) bool {
	for _, x := range subs {
		if strings.Contains(s, x) {
			return true
		}
	}
	return false
}

func TestExampleParses(t *testing.T) {
	f, err := Parse("/proj/worker-compose.yaml", []byte(Example), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	if f.Containers["api"].Restart != RestartAlways || f.Containers["metrics"].Required {
		t.Fatalf("example: %+v %+v", f.Containers["api"], f.Containers["metrics"])
	}
}

// TestEngineURLPatternIsTheSchemas: the parser and the JSON Schema check engine.url with one
// pattern, so neither accepts a URL the other refuses.
func TestEngineURLPatternIsTheSchemas(t *testing.T) {
	var doc struct {
		Defs struct {
			Engine struct {
				Properties struct {
					URL struct {
						AnyOf []struct{ Pattern string } `json:"anyOf"`
					} `json:"url"`
				} `json:"properties"`
			} `json:"engine"`
		} `json:"$defs"`
	}
	if err := json.Unmarshal(Schema(), &doc); err != nil {
		t.Fatal(err)
	}
	if got := doc.Defs.Engine.Properties.URL.AnyOf; len(got) == 0 || got[0].Pattern != engineURLPattern {
		t.Fatalf("schema.json's engine.url pattern is %+v; the parser's is %q", got, engineURLPattern)
	}
}
