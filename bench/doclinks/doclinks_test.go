// Package doclinks holds one test: every relative link in the repository's Markdown
// (README.md, docs/**) names a file or directory that exists, and every #anchor a heading
// of the page it points into, so that moving a page or renaming a heading cannot leave a
// dead link behind.
package doclinks

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// link matches a Markdown inline link or image: [text](target) or ![alt](target).
var link = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)\)`)

// codeSpan matches inline code, whose brackets are not links.
var codeSpan = regexp.MustCompile("`[^`]*`")

// skip lists trees whose Markdown is test data, written for another place.
var skip = []string{"bench/report/testdata", "examples/grpc"}

func TestRelativeLinksResolve(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	var pages []string
	err = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") && rel != "." {
				return filepath.SkipDir
			}
			for _, s := range skip {
				if rel == s {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if strings.HasSuffix(p, ".md") {
			pages = append(pages, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) < 5 {
		t.Fatalf("found %d Markdown pages under %s: is the test in the right place?", len(pages), root)
	}
	anchors := map[string]map[string]bool{}
	for _, page := range pages {
		for n, target := range links(t, page) {
			rel, _ := filepath.Rel(root, page)
			where := rel + ":" + n
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, frag, _ := strings.Cut(target, "#")
			dest := page
			if file != "" {
				dest = filepath.Join(filepath.Dir(page), filepath.FromSlash(file))
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s: link %q: %v", where, target, err)
					continue
				}
			}
			if frag == "" || !strings.HasSuffix(dest, ".md") {
				continue
			}
			if anchors[dest] == nil {
				anchors[dest] = headings(t, dest)
			}
			if !anchors[dest][frag] {
				t.Errorf("%s: link %q: no heading with anchor #%s in %s", where, target, frag, filepath.Base(dest))
			}
		}
	}
}

// links returns the link targets of a page outside fenced code blocks and code spans,
// keyed by "line:column" for messages.
func links(t *testing.T, page string) map[string]string {
	f, err := os.Open(page)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	fenced := false
	for line := 1; sc.Scan(); line++ {
		s := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(s), "```") {
			fenced = !fenced
			continue
		}
		if fenced || strings.HasPrefix(s, "    ") {
			continue
		}
		s = codeSpan.ReplaceAllString(s, "")
		for _, m := range link.FindAllStringSubmatchIndex(s, -1) {
			out[strconv.Itoa(line)+":"+strconv.Itoa(m[0]+1)] = s[m[2]:m[3]]
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// headings returns the anchors GitHub gives a page's headings: lower case, punctuation
// dropped, spaces as hyphens, a repeated anchor numbered -1, -2, ...
func headings(t *testing.T, page string) map[string]bool {
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	out := map[string]bool{}
	fenced := false
	for _, s := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(s), "```") {
			fenced = !fenced
			continue
		}
		if fenced || !strings.HasPrefix(s, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(s, "#"))
		a := slug(h)
		if n := seen[a]; n > 0 {
			out[a+"-"+strconv.Itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestSlug(t *testing.T) {
	for h, want := range map[string]string{
		"Watching a running tool":                        "watching-a-running-tool",
		"`-R`: connecting through rdma_cm":               "-r-connecting-through-rdma_cm",
		"rstream: a stream over rdmanet, or over Go TCP": "rstream-a-stream-over-rdmanet-or-over-go-tcp",
		"mckey: multicast":                               "mckey-multicast",
	} {
		if got := slug(h); got != want {
			t.Errorf("slug(%q) = %q, want %q", h, got, want)
		}
	}
}
