// Command icost measures what running code from beyond the instruction cache costs on
// this machine: it writes a Go program of 2048 small distinct functions (about one
// 64-byte cache line each) and chains of calls through the first N of them, each chain
// in one fixed shuffled order, as a message's path runs its functions in one order
// that is not their order in memory; builds it; and prints the time per call for N from
// 128 (8 KiB of code, in a 32 KiB L1i) to 2048 (128 KiB, beyond it and in L2).
//
//	go run ./bench/icost
//
// The difference between the largest chains and the smallest is what a line that is not
// in the L1i costs when the branch predictor knows the way (the front end fetches ahead
// along predicted branches and hides part of the L2's latency); DESIGN.md, "The
// instruction cache, and the profile-guided build", uses it to turn bench/icache.sh's
// miss counts into time. Needs the go command.
package main

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
)

const funcs = 2048

var chains = []int{128, 256, 384, 512, 640, 768, 1024, 1536, 2048}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "icost:", err)
		os.Exit(1)
	}
}

func run() error {
	dir, err := os.MkdirTemp("", "icost")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module icost\n\ngo 1.22\n"), 0o644); err != nil {
		return err
	}
	if err := write(filepath.Join(dir, "main.go")); err != nil {
		return err
	}
	bin := filepath.Join(dir, "icost")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir, build.Stderr = dir, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("go build: %w", err)
	}
	cmd := exec.Command(bin)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	return cmd.Run()
}

// write generates the measuring program: each function a short dependent chain of
// shifts and xors (its own constant keeps the linker from folding any two), never
// inlined; each chain a straight run of direct calls.
func write(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("package main\n\nimport (\n\t\"fmt\"\n\t\"time\"\n)\n\nvar sink uint64\n\n")
	for i := range funcs {
		p("//go:noinline\nfunc f%d(x uint64) uint64 { x ^= x << 13; x ^= x >> 7; x ^= x << 17; return x + %d }\n", i, i)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range chains {
		p("\nfunc chain%d(x uint64) uint64 {\n", n)
		for _, i := range r.Perm(n) {
			p("\tx = f%d(x)\n", i)
		}
		p("\treturn x\n}\n")
	}
	p("\nfunc main() {\n\tchains := []struct {\n\t\tn int\n\t\tf func(uint64) uint64\n\t}{")
	for _, n := range chains {
		p("{%d, chain%d}, ", n, n)
	}
	w.WriteString(`}
	best := make([]float64, len(chains))
	for round := 0; round < 5; round++ {
		for i, c := range chains {
			x := uint64(1)
			iters := 8000000 / c.n
			t := time.Now()
			for range iters {
				x = c.f(x)
			}
			ns := float64(time.Since(t).Nanoseconds()) / float64(iters*c.n)
			sink += x
			if round == 0 || ns < best[i] {
				best[i] = ns
			}
		}
	}
	fmt.Println("functions  code KiB  ns per call (best of 5 rounds)")
	for i, c := range chains {
		fmt.Printf("%9d  %8d  %.2f\n", c.n, c.n*64/1024, best[i])
	}
	for i, c := range chains {
		if c.n == 1024 || i == len(chains)-1 {
			fmt.Printf("beyond the L1i, per line, %d KiB of code against 8: %.2f ns\n", c.n*64/1024, best[i]-best[0])
		}
	}
}
`)
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
