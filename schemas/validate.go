package schemas

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
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
		// JSON Schema's "integer" admits 2.0, which encoding/json will not
		// put in an int: decode the validated value again, re-encoded (2.0
		// becomes 2). Only this path loses the input's key order.
		if b, merr := json.Marshal(generic); merr == nil && json.Unmarshal(b, dst) == nil {
			return nil
		}
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return fmt.Errorf("invalid %s: field %s cannot hold %s", v.what, quote(te.Field), te.Value)
		}
		return fmt.Errorf("invalid %s: %v", v.what, err)
	}
	return nil
}

var (
	missingRe   = regexp.MustCompile(`missing properties: \[(.*)\]`)
	additionalR = regexp.MustCompile(`unexpected additional properties \[(.*)\]`)
	typeRe      = regexp.MustCompile(`type: .* has type "(\w+)", want "?([\w\[\] ,"]+?)"?$`)
	// boundRe takes the bound from jsonschema-go's numeric and length
	// messages ("... is less than 0.000000", "... fewer than 16").
	boundRe = regexp.MustCompile(`(?:than|to) (-?[0-9.]+)$`)
	// quotedRe matches one Go-quoted string of a %q-formatted []string.
	quotedRe = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
)

// explain rewrites a jsonschema-go validation error as "field "x": reason".
func explain(msg string) string {
	// The innermost "validating /properties/a/properties/b..." names the field.
	field := ""
	last := msg
	if i := strings.LastIndex(msg, "validating /"); i >= 0 {
		seg := msg[i+len("validating "):]
		if j := strings.Index(seg, ": "); j >= 0 {
			field, last = fieldOf(seg[:j]), seg[j+2:]
		}
	} else if i := strings.Index(msg, "validating root: "); i >= 0 {
		last = msg[i+len("validating root: "):]
	}
	where := ""
	if field != "" {
		where = " in " + quote(field)
	}
	if m := missingRe.FindStringSubmatch(last); m != nil {
		names := listed(m[1])
		if len(names) == 1 {
			return fmt.Sprintf("missing required field %s%s", names[0], where)
		}
		return fmt.Sprintf("missing required fields %s%s", strings.Join(names, ", "), where)
	}
	if m := additionalR.FindStringSubmatch(last); m != nil {
		names := listed(m[1])
		if len(names) == 1 {
			return fmt.Sprintf("unknown field %s%s; remove it", names[0], where)
		}
		return fmt.Sprintf("unknown fields %s%s; remove them", strings.Join(names, ", "), where)
	}
	reason := last
	switch {
	case typeRe.MatchString(last):
		m := typeRe.FindStringSubmatch(last)
		// One type ("boolean") or a list (one of ["boolean" "string"]).
		want, list := m[2], strings.HasPrefix(m[2], "one of")
		want = strings.Join(strings.Fields(strings.NewReplacer(`"`, " ", "[", " ", "]", " ", ",", " ").Replace(strings.TrimPrefix(want, "one of"))), ", ")
		if list {
			want = "one of " + want
		}
		reason = fmt.Sprintf("must be of type %s, not %s", want, m[1])
	case strings.HasPrefix(last, "minimum:"):
		reason = "must be at least " + bound(last)
	case strings.HasPrefix(last, "exclusiveMinimum:"):
		reason = "must be greater than " + bound(last)
	case strings.HasPrefix(last, "maximum:"):
		reason = "must be at most " + bound(last)
	case strings.HasPrefix(last, "exclusiveMaximum:"):
		reason = "must be less than " + bound(last)
	case strings.HasPrefix(last, "enum:"):
		reason = "must be one of the listed values: " + strings.TrimSpace(strings.SplitN(last, ":", 2)[1])
	case strings.HasPrefix(last, "minLength:"):
		if n := bound(last); n != "1" {
			reason = "must be at least " + n + " characters long"
		} else {
			reason = "must not be empty"
		}
	case strings.HasPrefix(last, "maxLength:"):
		reason = "must be at most " + bound(last) + " characters long"
	case strings.HasPrefix(last, "minProperties:"), strings.HasPrefix(last, "maxProperties:"):
		reason = "needs exactly one of its properties"
	}
	if field == "" {
		return reason
	}
	return fmt.Sprintf("field %s %s", quote(field), reason)
}

func quote(s string) string { return `"` + s + `"` }

// listed returns the names of a %q-formatted []string ("a" "b"), sorted
// (jsonschema-go lists extra properties in map order) and each quoted for
// the message.
func listed(list string) []string {
	var out []string
	for _, q := range quotedRe.FindAllString(list, -1) {
		if name, err := strconv.Unquote(q); err == nil {
			q = quote(name)
		}
		out = append(out, q)
	}
	if len(out) == 0 {
		out = []string{quote(list)}
	}
	sort.Strings(out)
	return out
}

// fieldOf names the field a schema path points at:
// /properties/http/properties/tokens/items/properties/token is
// "http.tokens[].token".
func fieldOf(path string) string {
	var b strings.Builder
	segs := strings.Split(strings.TrimPrefix(path, "/"), "/")
	for i := 0; i < len(segs); i++ {
		switch {
		case segs[i] == "properties" && i+1 < len(segs):
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			i++
			b.WriteString(strings.NewReplacer("~1", "/", "~0", "~").Replace(segs[i]))
		case segs[i] == "items":
			b.WriteString("[]")
		}
	}
	return b.String()
}

// bound returns the limit a numeric or length message ends with, written
// the way a person would ("0", "64", "0.5"), or "the allowed limit" when
// the message has none.
func bound(msg string) string {
	m := boundRe.FindStringSubmatch(msg)
	if m == nil {
		return "the allowed limit"
	}
	f, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return m[1]
	}
	return strconv.FormatFloat(f, 'f', -1, 64)
}
