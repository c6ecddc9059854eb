package schemas

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
)

// Validator checks JSON values against a schema and words the first
// problem for a model or a person: which field, and what to do.
type Validator struct {
	what   string // "arguments for subagent", "config"
	schema *jsonschema.Resolved
}

// Compile resolves raw; what names the checked thing in error messages.
func Compile(what string, raw []byte) (*Validator, error) {
	var s jsonschema.Schema
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("schema for %s: %w", what, err)
	}
	rs, err := s.Resolve(nil)
	if err != nil {
		return nil, fmt.Errorf("schema for %s: %w", what, err)
	}
	return &Validator{what: what, schema: rs}, nil
}

// Decode validates value (any JSON-marshalable value, or raw JSON bytes;
// nil counts as {}) and decodes it into dst.
func (v *Validator) Decode(value any, dst any) error {
	var raw []byte
	switch x := value.(type) {
	case nil:
		raw = []byte("{}")
	case []byte:
		raw = x
	case json.RawMessage:
		raw = x
	default:
		b, err := json.Marshal(x)
		if err != nil {
			return fmt.Errorf("invalid %s: %v", v.what, err)
		}
		raw = b
	}
	var generic any
	if err := json.Unmarshal(raw, &generic); err != nil {
		return fmt.Errorf("invalid %s: not valid JSON: %v", v.what, err)
	}
	if _, ok := generic.(map[string]any); !ok {
		return fmt.Errorf("invalid %s: must be a JSON object", v.what)
	}
	if err := v.schema.Validate(generic); err != nil {
		return fmt.Errorf("invalid %s: %s", v.what, explain(err.Error()))
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		return fmt.Errorf("invalid %s: %v", v.what, err)
	}
	return nil
}

var (
	propPath    = regexp.MustCompile(`/properties/([^/:\s]+)`)
	missingRe   = regexp.MustCompile(`missing properties: \[(.*)\]`)
	additionalR = regexp.MustCompile(`unexpected additional properties \[(.*)\]`)
	typeRe      = regexp.MustCompile(`type: .* has type "(\w+)", want "?([\w\[\] ,"]+?)"?$`)
)

// explain rewrites a jsonschema-go validation error as "field "x": reason".
func explain(msg string) string {
	// The innermost "validating /properties/a/properties/b..." names the field.
	field := ""
	last := msg
	if i := strings.LastIndex(msg, "validating /"); i >= 0 {
		seg := msg[i+len("validating "):]
		if j := strings.Index(seg, ": "); j >= 0 {
			path, rest := seg[:j], seg[j+2:]
			var parts []string
			for _, m := range propPath.FindAllStringSubmatch(path, -1) {
				parts = append(parts, m[1])
			}
			field = strings.Join(parts, ".")
			if strings.HasSuffix(path, "/items") {
				field += "[]"
			}
			last = rest
		}
	} else if i := strings.Index(msg, "validating root: "); i >= 0 {
		last = msg[i+len("validating root: "):]
	}
	if m := missingRe.FindStringSubmatch(last); m != nil {
		names := strings.ReplaceAll(m[1], `"`, "")
		where := ""
		if field != "" {
			where = " in " + quote(field)
		}
		return fmt.Sprintf("missing required field %s%s", quote(names), where)
	}
	if m := additionalR.FindStringSubmatch(last); m != nil {
		names := strings.ReplaceAll(m[1], `"`, "")
		where := ""
		if field != "" {
			where = " in " + quote(field)
		}
		return fmt.Sprintf("unknown field %s%s; remove it", quote(names), where)
	}
	reason := last
	switch {
	case typeRe.MatchString(last):
		m := typeRe.FindStringSubmatch(last)
		reason = fmt.Sprintf("must be of type %s, not %s", strings.Trim(m[2], `"`), m[1])
	case strings.HasPrefix(last, "minimum:"), strings.HasPrefix(last, "exclusiveMinimum:"):
		reason = "is too small: " + strings.TrimSpace(strings.SplitN(last, ":", 2)[1])
	case strings.HasPrefix(last, "enum:"):
		reason = "must be one of the listed values: " + strings.TrimSpace(strings.SplitN(last, ":", 2)[1])
	case strings.HasPrefix(last, "minLength:"):
		reason = "must not be empty"
	case strings.HasPrefix(last, "maxLength:"):
		reason = "is too long"
	case strings.HasPrefix(last, "minProperties:"), strings.HasPrefix(last, "maxProperties:"):
		reason = "needs exactly one of its properties"
	}
	if field == "" {
		return reason
	}
	return fmt.Sprintf("field %s %s", quote(field), reason)
}

func quote(s string) string { return `"` + s + `"` }
