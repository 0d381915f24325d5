package cli

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// The tests in this file hold docs/cli.md to the command tree and the
// exit codes: a command, flag or exit code the code has and the page does
// not (or the other way round) fails them, named.

const cliDoc = "../../docs/cli.md"

// docSection is one heading of a markdown page and the text under it, up
// to the next heading of any level.
type docSection struct {
	level   int
	heading string
	text    string // the heading line and its body
}

func readDocSections(t *testing.T, path string) []docSection {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var secs []docSection
	fence := false
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if strings.HasPrefix(line, "```") {
			fence = !fence
		}
		if !fence && strings.HasPrefix(line, "#") {
			level := len(line) - len(strings.TrimLeft(line, "#"))
			secs = append(secs, docSection{level: level, heading: strings.TrimSpace(line[level:])})
		}
		if len(secs) > 0 {
			secs[len(secs)-1].text += line
		}
	}
	return secs
}

// chapter is the text of the level-2 section headed title, its
// subsections included.
func chapter(t *testing.T, secs []docSection, title string) (string, []docSection) {
	t.Helper()
	for i, s := range secs {
		if s.level != 2 || s.heading != title {
			continue
		}
		text := s.text
		var subs []docSection
		for _, sub := range secs[i+1:] {
			if sub.level <= 2 {
				break
			}
			text += sub.text
			subs = append(subs, sub)
		}
		return text, subs
	}
	t.Fatalf("%s has no section %q", cliDoc, "## "+title)
	return "", nil
}

// mentions reports whether text names flag as `--name` (or shorthand `-n`),
// not as a prefix of a longer flag.
func mentions(text, flag string) bool {
	return regexp.MustCompile(`(^|[^\w-])` + regexp.QuoteMeta(flag) + `($|[^\w-])`).MatchString(text)
}

// docFlags is every `--name` written in text.
func docFlags(text string) []string {
	var names []string
	for _, m := range regexp.MustCompile(`(?:^|[^\w-])--([a-z][\w-]*)`).FindAllStringSubmatch(text, -1) {
		if !slices.Contains(names, m[1]) {
			names = append(names, m[1])
		}
	}
	return names
}

// commands is every command below root, depth first.
func commands(root *cobra.Command) []*cobra.Command {
	var all []*cobra.Command
	for _, c := range root.Commands() {
		if c.Name() == "help" || c.Name() == "completion" {
			continue // cobra's own
		}
		all = append(all, c)
		all = append(all, commands(c)...)
	}
	return all
}

// path is c's command line below the root: "rollback", or "a b" for a
// subcommand b of a.
func path(c *cobra.Command) string {
	return strings.TrimPrefix(c.CommandPath(), c.Root().Name()+" ")
}

// eachFlag calls fn for every flag of fs but cobra's own --help.
func eachFlag(fs *pflag.FlagSet, fn func(*pflag.Flag)) {
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Name != "help" {
			fn(f)
		}
	})
}

// Every command has a "### `COMMAND ...`" section under "## Commands"
// naming each of its flags; every such section is a command.
func TestDocsCommands(t *testing.T) {
	root := newRoot(&globals{})
	_, subs := chapter(t, readDocSections(t, cliDoc), "Commands")
	section := map[string]string{} // command path -> its section
	for _, s := range subs {
		if s.level != 3 {
			continue
		}
		m := regexp.MustCompile("^`([a-z][a-z -]*?)(?: [^a-z].*)?`$").FindStringSubmatch(s.heading)
		if m == nil {
			t.Errorf("%s: heading %q under Commands does not start with a command in backquotes", cliDoc, s.heading)
			continue
		}
		section[m[1]] = s.text
	}
	known := map[string]bool{}
	for _, c := range commands(root) {
		p := path(c)
		known[p] = true
		text, ok := section[p]
		if !ok {
			t.Errorf("%s: command %q has no section \"### `%s ...`\" under Commands", cliDoc, p, p)
			continue
		}
		eachFlag(c.LocalFlags(), func(f *pflag.Flag) {
			if !mentions(text, "--"+f.Name) {
				t.Errorf("%s: flag --%s of %q is not in its section", cliDoc, f.Name, p)
			}
			if f.Shorthand != "" && !mentions(text, "-"+f.Shorthand) {
				t.Errorf("%s: shorthand -%s of %q's --%s is not in its section", cliDoc, f.Shorthand, p, f.Name)
			}
		})
		for _, name := range docFlags(text) {
			if c.Flag(name) == nil {
				t.Errorf("%s: the section of %q names --%s, which %q does not take", cliDoc, p, name, p)
			}
		}
	}
	for p := range section {
		if !known[p] {
			t.Errorf("%s: section for %q, which is no command of stratum-upgrade", cliDoc, p)
		}
	}
}

// Every flag of the root command (the global flags) has a row in the table
// under "## Global flags" whose default is the flag's, and every flag that
// section names exists. A hidden flag may be described in the text instead.
func TestDocsGlobalFlags(t *testing.T) {
	root := newRoot(&globals{})
	text, rows := flagRows(t, "Global flags")
	eachFlag(root.LocalFlags(), func(f *pflag.Flag) {
		cells, ok := rows[f.Name]
		switch {
		case !ok && f.Hidden:
			if !mentions(text, "--"+f.Name) {
				t.Errorf("%s: hidden global flag --%s is not under Global flags", cliDoc, f.Name)
			}
			return
		case !ok:
			t.Errorf("%s: global flag --%s has no row in the Global flags table", cliDoc, f.Name)
			return
		}
		if f.Shorthand != "" && !mentions(cells[0], "-"+f.Shorthand) {
			t.Errorf("%s: shorthand -%s of --%s is not in its Global flags row", cliDoc, f.Shorthand, f.Name)
		}
		if len(cells) < 2 || !sameDefault(f, strings.Trim(cells[1], "`")) {
			t.Errorf("%s: the Global flags row of --%s does not give its default %q", cliDoc, f.Name, f.DefValue)
		}
	})
	for _, name := range docFlags(text) {
		if root.PersistentFlags().Lookup(name) == nil {
			t.Errorf("%s: Global flags names --%s, which is no global flag", cliDoc, name)
		}
	}
}

// sameDefault reports whether doc, the default column of a docs row, is
// f's default: "none" for an empty one, durations compared as durations
// (3m is 3m0s).
func sameDefault(f *pflag.Flag, doc string) bool {
	switch {
	case f.DefValue == "":
		return doc == "none"
	case f.Value.Type() == "duration":
		want, err1 := time.ParseDuration(f.DefValue)
		got, err2 := time.ParseDuration(doc)
		return err1 == nil && err2 == nil && got == want
	}
	return doc == f.DefValue
}

// exitConstants parses this package's Exit* constants from its source, so
// that a new one cannot be missed by a hand-kept list.
func exitConstants(t *testing.T) map[string]int {
	t.Helper()
	fset := token.NewFileSet()
	consts := map[string]int{}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if !strings.HasPrefix(name.Name, "Exit") {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.INT {
						t.Fatalf("%s: %s is not an integer literal; this test reads exit codes from the source", file, name.Name)
					}
					n, err := strconv.Atoi(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					consts[name.Name] = n
				}
			}
		}
	}
	if len(consts) == 0 {
		t.Fatal("found no Exit* constants")
	}
	return consts
}

// Every exit code constant is in the --help list (made from exitCodes) and
// in the exit-code table of docs/cli.md, and neither has a code that is
// no constant.
func TestDocsExitCodes(t *testing.T) {
	consts := exitConstants(t)
	names := make([]string, 0, len(consts))
	byCode := map[int]string{}
	for name, code := range consts {
		names = append(names, name)
		byCode[code] = name
	}
	sort.Strings(names)

	// The --help list.
	inHelp := map[int]bool{}
	for _, c := range exitCodes {
		if _, ok := byCode[c.code]; !ok {
			t.Errorf("exitCodes lists %d, which is no Exit* constant", c.code)
		}
		if inHelp[c.code] {
			t.Errorf("exitCodes lists %d twice", c.code)
		}
		inHelp[c.code] = true
	}
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"--help"}, &stdout, &stderr); code != ExitOK {
		t.Fatalf("--help exited %d: %s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), exitCodesHelp) {
		t.Errorf("stratum-upgrade --help does not show the exit codes:\n%s", stdout.String())
	}

	// The docs/cli.md table.
	text, _ := chapter(t, readDocSections(t, cliDoc), "Exit codes")
	inDoc := map[int]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\| *(\d+) *\|`).FindAllStringSubmatch(text, -1) {
		n, _ := strconv.Atoi(m[1])
		if _, ok := byCode[n]; !ok {
			t.Errorf("%s: the exit-code table has %d, which is no Exit* constant", cliDoc, n)
		}
		inDoc[n] = true
	}
	for _, name := range names {
		code := consts[name]
		if !inHelp[code] {
			t.Errorf("%s (%d) is not in exitCodes, so not in --help", name, code)
		}
		if !inDoc[code] {
			t.Errorf("%s: %s (%d) is not in the table under \"## Exit codes\"", cliDoc, name, code)
		}
	}
}

// The full exit-code table is in docs/cli.md only: README.md and the other
// pages link to it instead of keeping a copy that can drift.
func TestDocsOneExitCodeTable(t *testing.T) {
	pages, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, "../../README.md")
	header := regexp.MustCompile(`(?mi)^\| *(exit|exit code|code) *\|`)
	for _, page := range pages {
		if filepath.Base(page) == "cli.md" {
			continue
		}
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		if header.Match(b) {
			t.Errorf("%s has an exit-code table; link to docs/cli.md#exit-codes instead", page)
		}
	}
}

// flagRows is the text of docs/cli.md's section heading and its flag
// table: each flag its first cell names -> the trimmed cells of its row.
func flagRows(t *testing.T, heading string) (string, map[string][]string) {
	t.Helper()
	text, _ := chapter(t, readDocSections(t, cliDoc), heading)
	rows := map[string][]string{}
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "|") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		for _, name := range docFlags(cells[0]) {
			rows[name] = cells
		}
	}
	return text, rows
}
