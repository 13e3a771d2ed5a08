package main

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// A plain text emitter for Go arm64 assembly: routines are written as a list of lines (op, word,
// label, comment) and laid out at the end, mnemonics aligned over each run of instructions and
// trailing comments over each run of commented instructions.

type kind int

const (
	kRaw     kind = iota // verbatim at column 0: header, doc comments, TEXT
	kBlank               // empty line
	kLabel               // "name:"
	kComment             // "\t// text"
	kOp                  // "\tMNEMONIC args // note"
)

type line struct {
	kind             kind
	text             string // raw text, label name or comment
	mnem, args, note string // kOp
}

type emitter struct{ lines []line }

func (e *emitter) add(l line) { e.lines = append(e.lines, l) }

func (e *emitter) last() kind {
	if len(e.lines) == 0 {
		return kBlank
	}
	return e.lines[len(e.lines)-1].kind
}

// raw writes a line as it is.
func (e *emitter) raw(format string, a ...any) {
	e.add(line{kind: kRaw, text: fmt.Sprintf(format, a...)})
}

// blank writes an empty line (never two in a row).
func (e *emitter) blank() {
	if e.last() != kBlank {
		e.add(line{kind: kBlank})
	}
}

// doc writes a comment block at column 0 after a blank line; "" is an empty comment line, and a
// line that starts with a tab is preformatted (gofmt's doc comment convention).
func (e *emitter) doc(lines ...string) {
	e.blank()
	for _, s := range lines {
		switch {
		case s == "" || s[0] == '\t':
			e.raw("//%s", s)
		default:
			e.raw("// %s", s)
		}
	}
}

// text opens a routine: TEXT ·name(SB), NOSPLIT, $0-args.
func (e *emitter) text(name string, args int) { e.raw("TEXT ·%s(SB), NOSPLIT, $0-%d", name, args) }

// textFrame opens a routine with a local frame of frame bytes: not NOSPLIT (the prologue checks the
// stack and grows it), TEXT ·name(SB), 0, $frame-args.
func (e *emitter) textFrame(name string, frame, args int) {
	e.raw("TEXT ·%s(SB), 0, $%d-%d", name, frame, args)
}

// prefixLabels prefixes every label defined from line first on, and every use of it there, with p
// (a piece emitted into a TEXT that has labels of the same names).
func (e *emitter) prefixLabels(first int, p string) {
	names := map[string]bool{}
	for _, l := range e.lines[first:] {
		if l.kind == kLabel {
			names[l.text] = true
		}
	}
	for i := first; i < len(e.lines); i++ {
		l := &e.lines[i]
		switch l.kind {
		case kLabel:
			l.text = p + l.text
		case kOp:
			args := strings.Split(l.args, ", ")
			for j, a := range args {
				if names[a] {
					args[j] = p + a
				}
			}
			l.args = strings.Join(args, ", ")
		}
	}
}

// label writes "name:" after a blank line.
func (e *emitter) label(name string) {
	e.blank()
	e.add(line{kind: kLabel, text: name})
}

// comment writes an indented comment, after a blank line unless it follows a label or a comment.
func (e *emitter) comment(format string, a ...any) {
	if k := e.last(); k != kLabel && k != kComment {
		e.blank()
	}
	e.add(line{kind: kComment, text: fmt.Sprintf(format, a...)})
}

// op writes an instruction the assembler knows; each argument prints with %v.
func (e *emitter) op(mnem string, args ...any) { e.opn("", mnem, args...) }

// opn is op with a trailing comment.
func (e *emitter) opn(note, mnem string, args ...any) {
	s := make([]string, len(args))
	for i, a := range args {
		s[i] = fmt.Sprint(a)
	}
	e.add(line{kind: kOp, mnem: mnem, args: strings.Join(s, ", "), note: note})
}

// word writes an instruction the assembler lacks as WORD $enc // its ARM text.
func (e *emitter) word(i inst) { e.opn(i.asm, "WORD", fmt.Sprintf("$%#08x", i.enc)) }

// bytes lays the lines out.
func (e *emitter) bytes() []byte {
	var b strings.Builder
	for i := 0; i < len(e.lines); {
		l := e.lines[i]
		switch l.kind {
		case kRaw:
			b.WriteString(l.text)
		case kLabel:
			b.WriteString(l.text + ":")
		case kComment:
			b.WriteString("\t// " + l.text)
		case kBlank:
		}
		if l.kind != kOp {
			b.WriteString("\n")
			i++
			continue
		}
		j := i
		for j < len(e.lines) && e.lines[j].kind == kOp {
			j++
		}
		e.block(&b, e.lines[i:j])
		i = j
	}
	return []byte(b.String())
}

// block lays out a run of instructions.
func (e *emitter) block(b *strings.Builder, ops []line) {
	w := 0
	for _, l := range ops {
		w = max(w, len(l.mnem))
	}
	body := make([]string, len(ops))
	for i, l := range ops {
		body[i] = l.mnem
		if l.args != "" {
			body[i] = fmt.Sprintf("%-*s %s", w, l.mnem, l.args)
		}
	}
	for i := 0; i < len(ops); {
		if ops[i].note == "" {
			b.WriteString("\t" + body[i] + "\n")
			i++
			continue
		}
		j, cw := i, 0
		for ; j < len(ops) && ops[j].note != ""; j++ {
			cw = max(cw, utf8.RuneCountInString(body[j]))
		}
		for ; i < j; i++ {
			pad := strings.Repeat(" ", cw-utf8.RuneCountInString(body[i]))
			b.WriteString("\t" + body[i] + pad + " // " + ops[i].note + "\n")
		}
	}
}

// Operand helpers.

func imm(n int) string                { return fmt.Sprintf("$%d", n) }
func post(off int, r Reg) string      { return fmt.Sprintf("%d(%v)", off, r) }
func mem(r Reg) string                { return fmt.Sprintf("(%v)", r) }
func postReg(r, inc Reg) string       { return fmt.Sprintf("(%v)(%v)", r, inc) }
func arg(name string, off int) string { return fmt.Sprintf("%s+%d(FP)", name, off) }

// list is a register list [V0.S4, V1.S4].
func list(vs ...Vec) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = v.String()
	}
	return "[" + strings.Join(s, ", ") + "]"
}
