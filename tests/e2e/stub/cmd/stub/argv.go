package main

// The engines' command-line parsers, as data: the option tables app/engines/data/*.json (extracted
// from the released wheels by scripts/extract-engine-flags.sh), walked the way argparse walks them.
// This mirrors app/engines/argv.py: exact option strings, unique prefixes (argparse's
// allow_abbrev), `--flag=value`, arity (none / optional / many / one), vLLM's rewrite of `_` to
// `-` in a `--` token's name, its dotted JSON members (`--kv-transfer-config.kv_role kv_both`) and
// `-O3`. Anything the table lacks is refused the way argparse refuses it, naming the token.

import (
	"embed"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// build.sh copies the option tables here (the directory is git-ignored).
//
//go:embed tables/*.json
var tableFiles embed.FS

// Table is one parser's option table (the format of app/engines/data/*.json).
type Table struct {
	Package       string            `json:"package"`
	Version       string            `json:"version"`
	Parser        string            `json:"parser"`
	Options       []string          `json:"options"`
	Synonyms      map[string]string `json:"synonyms"`
	NoValue       []string          `json:"no_value"`
	OptionalValue []string          `json:"optional_value"`
	ManyValues    []string          `json:"many_values"`
	Negative      []string          `json:"negative"`

	// How the parser rewrites a line first (vLLM's FlexibleArgumentParser), set by the caller.
	underscores bool
	dotted      bool

	options  map[string]bool
	arity    map[string]string
	negative map[string]bool
}

// loadTable reads the table whose file name starts with prefix (e.g. "vllm-" but not "vllm-router-").
func loadTable(prefix string, exclude string, underscores, dotted bool) (*Table, error) {
	entries, err := tableFiles.ReadDir("tables")
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, prefix) || (exclude != "" && strings.HasPrefix(name, exclude)) {
			continue
		}
		raw, err := tableFiles.ReadFile("tables/" + name)
		if err != nil {
			return nil, err
		}
		t := &Table{underscores: underscores, dotted: dotted}
		if err := json.Unmarshal(raw, t); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		t.options = map[string]bool{}
		for _, o := range t.Options {
			t.options[o] = true
		}
		t.arity = map[string]string{}
		for _, o := range t.NoValue {
			t.arity[o] = "none"
		}
		for _, o := range t.OptionalValue {
			t.arity[o] = "optional"
		}
		for _, o := range t.ManyValues {
			t.arity[o] = "many"
		}
		t.negative = map[string]bool{}
		for _, o := range t.Negative {
			t.negative[o] = true
		}
		return t, nil
	}
	return nil, fmt.Errorf("no option table %s*.json embedded (build with tests/e2e/stub/build.sh)", prefix)
}

func (t *Table) canonical(option string) string {
	if c, ok := t.Synonyms[option]; ok {
		return c
	}
	return option
}

// Option is one option occurrence as the engine reads it.
type Option struct {
	Flag    string   // canonical long option, e.g. --tensor-parallel-size
	Token   string   // the argv token as written
	Values  []string // the value(s) it took
	Member  string   // vLLM dotted member path ("kv_role"), else ""
	Negated bool     // a no-value spelling that stores False (--no-enforce-eager)
}

// Parsed is a whole command line as the engine's parser reads it.
type Parsed struct {
	Options     []Option
	Positionals []string
}

// Last is the last value given to a canonical flag (argparse: the last one wins), and whether any was.
func (p *Parsed) Last(flag string) (string, bool) {
	for i := len(p.Options) - 1; i >= 0; i-- {
		o := p.Options[i]
		if o.Flag == flag && o.Member == "" {
			if len(o.Values) == 0 {
				return "", true
			}
			return o.Values[0], true
		}
	}
	return "", false
}

// All returns every occurrence of a canonical flag, dotted members included.
func (p *Parsed) All(flag string) []Option {
	var out []Option
	for _, o := range p.Options {
		if o.Flag == flag {
			out = append(out, o)
		}
	}
	return out
}

// ParseError is argparse's refusal: the message names the option.
type ParseError struct{ Msg string }

func (e *ParseError) Error() string { return e.Msg }

var negativeNumber = regexp.MustCompile(`^-\d+$|^-\d*\.\d+$`)

const (
	kindPositional = iota
	kindOption
	kindUnknown
	kindAmbiguous
)

type match struct {
	kind       int
	option     string // the option string matched
	explicit   *string
	candidates []string
}

// vllmRewrite: vLLM turns `_` into `-` in a `--` token's name, up to the first `.` and before `=`.
func vllmRewrite(token string) string {
	if !strings.HasPrefix(token, "--") {
		return token
	}
	key, value, hasValue := strings.Cut(token, "=")
	head, tail, hasDot := strings.Cut(key[2:], ".")
	out := "--" + strings.ReplaceAll(head, "_", "-")
	if hasDot {
		out += "." + tail
	}
	if hasValue {
		out += "=" + value
	}
	return out
}

// matchArg is argparse's _parse_optional: option, ambiguity, unknown option, or positional.
func (t *Table) matchArg(arg string) match {
	if arg == "" || arg[0] != '-' || arg == "-" {
		return match{kind: kindPositional}
	}
	if t.options[arg] {
		return match{kind: kindOption, option: arg}
	}
	name, value, hasValue := strings.Cut(arg, "=")
	if hasValue && t.options[name] {
		return match{kind: kindOption, option: name, explicit: &value}
	}
	// argparse's prefix search over every option string.
	type found struct {
		option string
		value  *string
	}
	var all []found
	var explicit *string
	if hasValue {
		explicit = &value
	}
	if strings.HasPrefix(arg, "--") {
		for o := range t.options {
			if strings.HasPrefix(o, name) {
				all = append(all, found{o, explicit})
			}
		}
	} else {
		for o := range t.options {
			if len(arg) >= 2 && o == arg[:2] {
				attached := arg[2:]
				all = append(all, found{o, &attached})
			} else if strings.HasPrefix(o, name) {
				all = append(all, found{o, explicit})
			}
		}
	}
	if len(all) > 1 {
		var c []string
		for _, f := range all {
			c = append(c, f.option)
		}
		sort.Strings(c)
		return match{kind: kindAmbiguous, candidates: c}
	}
	if len(all) == 1 {
		return match{kind: kindOption, option: all[0].option, explicit: all[0].value}
	}
	if negativeNumber.MatchString(arg) || strings.Contains(arg, " ") {
		return match{kind: kindPositional}
	}
	return match{kind: kindUnknown}
}

func (t *Table) classify(token string) match {
	if token == "--" {
		return match{kind: kindPositional}
	}
	if t.underscores {
		if strings.HasPrefix(token, "-O") && !strings.HasPrefix(token, "--") && token != "-O" {
			v := token[2:]
			if strings.HasPrefix(v, "=") {
				v = v[1:]
			}
			return match{kind: kindOption, option: "--optimization-level", explicit: &v}
		}
		return t.matchArg(vllmRewrite(token))
	}
	return t.matchArg(token)
}

// dottedName: vLLM's dotted form (name, member, value), or ok=false.
func (t *Table) dottedName(token string) (name, member string, value *string, ok bool) {
	if !t.dotted || !strings.HasPrefix(token, "-") {
		return "", "", nil, false
	}
	key, v, hasValue := strings.Cut(vllmRewrite(token), "=")
	if !strings.Contains(key, ".") {
		return "", "", nil, false
	}
	name, member, _ = strings.Cut(key, ".")
	member = strings.TrimSuffix(member, "+")
	if hasValue {
		value = &v
	}
	return name, member, value, true
}

func (t *Table) isValue(token string) bool {
	return token != "--" && t.classify(token).kind == kindPositional
}

func (t *Table) arityOf(option string) string {
	if a, ok := t.arity[option]; ok {
		return a
	}
	return "one"
}

func refusal(m match, token string) error {
	if m.kind == kindAmbiguous {
		return &ParseError{fmt.Sprintf("ambiguous option: %s could match %s", strings.SplitN(token, "=", 2)[0],
			strings.Join(m.candidates, ", "))}
	}
	return &ParseError{fmt.Sprintf("unrecognized arguments: %s", token)}
}

// Parse walks argv the way the engine's parser does and refuses what it would refuse.
func (t *Table) Parse(argv []string) (*Parsed, error) {
	p := &Parsed{}
	removed := map[int]bool{}
	// vLLM pulls dotted members (and the token after each) out before argparse runs.
	for i := 0; t.dotted && i < len(argv); {
		name, member, value, ok := t.dottedName(argv[i])
		if !ok {
			i++
			continue
		}
		step := 1
		if value == nil {
			step = 2
			if i+1 >= len(argv) {
				return nil, &ParseError{fmt.Sprintf("argument %s: expected one argument", argv[i])}
			}
			v := argv[i+1]
			value = &v
		}
		m := t.matchArg(name)
		if m.kind != kindOption {
			return nil, refusal(m, argv[i])
		}
		p.Options = append(p.Options, Option{Flag: t.canonical(m.option), Token: argv[i], Values: []string{*value}, Member: member})
		for k := i; k < i+step; k++ {
			removed[k] = true
		}
		i += step
	}
	var rest []string
	for k, token := range argv {
		if !removed[k] {
			rest = append(rest, token)
		}
	}
	var unknown []string
	for j := 0; j < len(rest); {
		token := rest[j]
		j++
		if token == "--" {
			p.Positionals = append(p.Positionals, rest[j:]...)
			break
		}
		if t.underscores && token == "-O" && j < len(rest) && strings.Contains("0123", rest[j]) && len(rest[j]) == 1 {
			p.Options = append(p.Options, Option{Flag: "--optimization-level", Token: token, Values: []string{rest[j]}})
			j++
			continue
		}
		m := t.classify(token)
		switch m.kind {
		case kindPositional:
			p.Positionals = append(p.Positionals, token)
			continue
		case kindUnknown:
			unknown = append(unknown, token)
			continue
		case kindAmbiguous:
			return nil, refusal(m, token)
		}
		arity := t.arityOf(m.option)
		var values []string
		if m.explicit != nil {
			if arity == "none" {
				return nil, &ParseError{fmt.Sprintf("argument %s: ignored explicit argument '%s'", token, *m.explicit)}
			}
			values = []string{*m.explicit}
		} else if arity != "none" {
			limit := 1
			if arity == "many" {
				limit = len(rest)
			}
			for j < len(rest) && len(values) < limit && t.isValue(rest[j]) {
				values = append(values, rest[j])
				j++
			}
			if len(values) == 0 && arity != "optional" {
				what := "expected one argument"
				if arity == "many" {
					what = "expected at least one argument"
				}
				return nil, &ParseError{fmt.Sprintf("argument %s: %s", token, what)}
			}
		}
		p.Options = append(p.Options, Option{Flag: t.canonical(m.option), Token: token, Values: values,
			Negated: t.negative[m.option]})
	}
	if len(unknown) > 0 {
		return nil, &ParseError{"unrecognized arguments: " + strings.Join(unknown, " ")}
	}
	return p, nil
}
