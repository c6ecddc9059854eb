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
	root   *jsonschema.Schema // for the known names an unknown field is compared with
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
	return &Validator{what: what, schema: rs, root: &s}, nil
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
		return fmt.Errorf("invalid %s: not valid JSON%s: %v", v.what, position(raw, err), err)
	}
	if _, ok := generic.(map[string]any); !ok {
		return fmt.Errorf("invalid %s: must be a JSON object", v.what)
	}
	if err := v.schema.Validate(generic); err != nil {
		return fmt.Errorf("invalid %s: %s", v.what, explainIn(err.Error(), v.root))
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
func explain(msg string) string { return explainIn(msg, nil) }

// explainIn is explain with the schema the error came from, so an unknown
// field can be matched with the nearest known one ("did you mean ...?").
func explainIn(msg string, root *jsonschema.Schema) string {
	// The innermost "validating /properties/a/properties/b..." names the field.
	field, path := "", ""
	last := msg
	if i := strings.LastIndex(msg, "validating /"); i >= 0 {
		seg := msg[i+len("validating "):]
		if j := strings.Index(seg, ": "); j >= 0 {
			path = seg[:j]
			field, last = fieldOf(path), seg[j+2:]
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
		known := knownNames(root, path)
		var hints []string
		for _, n := range names {
			if near := nearest(strings.Trim(n, `"`), known); near != "" {
				hints = append(hints, fmt.Sprintf("%s for %s", quote(near), n))
			}
		}
		if len(names) == 1 {
			if len(hints) == 1 {
				return fmt.Sprintf("unknown field %s%s; did you mean %s?", names[0], where, strings.SplitN(hints[0], " for ", 2)[0])
			}
			return fmt.Sprintf("unknown field %s%s; remove it", names[0], where)
		}
		if len(hints) > 0 {
			return fmt.Sprintf("unknown fields %s%s; remove them or rename them (did you mean %s?)", strings.Join(names, ", "), where, strings.Join(hints, ", "))
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

// position words where a JSON decoding error is in raw ("at line 3,
// column 7"), or "" when the error carries no offset.
func position(raw []byte, err error) string {
	var off int64
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		off = se.Offset
	case errors.As(err, &te):
		off = te.Offset
	default:
		return ""
	}
	// The offset is just past the offending byte: point at that byte.
	off = max(0, min(off-1, int64(len(raw))))
	line, col := 1, 1
	for _, b := range raw[:off] {
		if b == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return fmt.Sprintf(" at line %d, column %d", line, col)
}

// knownNames lists the property names the schema allows at path (a
// jsonschema-go path such as /properties/llm or "" for the root).
func knownNames(root *jsonschema.Schema, path string) []string {
	s := root
	segs := strings.Split(strings.TrimPrefix(path, "/"), "/")
	for i := 0; s != nil && i < len(segs); i++ {
		switch {
		case segs[i] == "":
		case segs[i] == "properties" && i+1 < len(segs):
			i++
			s = s.Properties[strings.NewReplacer("~1", "/", "~0", "~").Replace(segs[i])]
		case segs[i] == "items":
			s = s.Items
		default:
			return nil // a path through combinators: no suggestion
		}
	}
	if s == nil {
		return nil
	}
	names := make([]string, 0, len(s.Properties))
	for n := range s.Properties {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// nearest returns the known name closest to name by edit distance when it
// is close enough to be a typo (at most 2 edits, and fewer than half the
// name), or "".
func nearest(name string, known []string) string {
	best, bestD := "", 3
	for _, k := range known {
		if d := editDistance(strings.ToLower(name), strings.ToLower(k)); d < bestD && 2*d < len(name) {
			best, bestD = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
