package completion

import (
	"fmt"
	"io"
	"regexp"
	"strings"

	"apollo/engine/pipeline"
	"apollo/engine/usage"
)

// What a command's positional arguments are, for shell completion.
const (
	ArgNone     = ""         // no arguments
	ArgPipeline = "pipeline" // a *.yaml or *.yml file
	ArgTask     = "task"     // a task id, or a log file (*.jsonl, *.jsonl.gz)
	ArgLua      = "lua"      // a *.lua file
	ArgWords    = "words"    // one of the command's Words
	ArgCommand  = "command"  // one of apollo's commands
)

// What a flag's value is, for shell completion.
const (
	ValueNone = ""     // a boolean flag: no value
	ValueAny  = "any"  // anything: nothing to offer
	ValueDir  = "dir"  // a folder
	ValueTask = "task" // a task id
)

// Shells that Write knows.
var Shells = []string{"bash", "zsh", "fish"}

// Command describes one command for shell completion.
type Command struct {
	Name    string
	Summary string
	Args    string   // one of the Arg* kinds
	Words   []string // the choices of its first argument, for ArgWords
	Flags   []Flag
}

// Flag describes one flag of a command.
type Flag struct {
	Name   string // without "--"
	Short  string // one letter, or ""
	Usage  string
	Value  string   // one of the Value* kinds
	Values []string // fixed choices of the value, if any
}

// Write writes the completion script of shell for cmds. The
// scripts complete commands, flags, flag values (folders, fixed choices,
// task ids), pipeline files (*.yaml, *.yml), Lua files and task ids; they
// get the task ids from `apollo list --ids --all` (with the --state-dir
// given on the command line, in bash).
func Write(w io.Writer, shell string, cmds []Command) error {
	var s string
	switch shell {
	case "bash":
		s = bashCompletion(cmds)
	case "zsh":
		s = zshCompletion(cmds)
	case "fish":
		s = fishCompletion(cmds)
	default:
		return &usage.Error{Msg: fmt.Sprintf("completion: unknown shell %q%s; apollo writes completion for bash, zsh and fish",
			shell, pipeline.DidYouMean(shell, Shells))}
	}
	_, err := io.WriteString(w, s)
	return err
}

func commandNames(cmds []Command) string {
	names := make([]string, len(cmds))
	for i, c := range cmds {
		names[i] = c.Name
	}
	return strings.Join(names, " ")
}

// flagWords lists a command's flags as the shell sees them: --name, -x.
func flagWords(c Command) string {
	var words []string
	for _, f := range c.Flags {
		words = append(words, "--"+f.Name)
		if f.Short != "" {
			words = append(words, "-"+f.Short)
		}
	}
	return strings.Join(words, " ")
}

// shortUsage is a flag's usage without its asides (parentheses, what
// follows a ";") and without characters that the shells' completion
// syntaxes treat specially, except "'": see zshQuote and fishQuote.
func shortUsage(s string) string {
	s = asides.ReplaceAllString(s, "")
	if i := strings.Index(s, ";"); i > 0 {
		s = s[:i]
	}
	s = strings.NewReplacer("[", "", "]", "", ":", " -", "\\", "", "`", "", "$", "").Replace(s)
	return strings.TrimSpace(s)
}

var asides = regexp.MustCompile(`\s*\([^)]*\)`)

// zshQuote writes s inside a single-quoted zsh word.
func zshQuote(s string) string { return strings.ReplaceAll(s, "'", `'\''`) }

// fishQuote writes s inside a single-quoted fish word.
func fishQuote(s string) string { return strings.ReplaceAll(s, "'", `\'`) }

const bashHeader = `# bash completion for apollo.
# Load it in the current shell:   source <(apollo completion bash)
# or for every shell:             apollo completion bash > ~/.local/share/bash-completion/completions/apollo

# _apollo_task_ids prints the task ids of the state folder named on the
# command line (--state-dir), else of the default one.
_apollo_task_ids() {
    local i args=()
    for ((i = 1; i < ${#COMP_WORDS[@]}; i++)); do
        case "${COMP_WORDS[i]}" in
        --state-dir) args=(--state-dir "${COMP_WORDS[i + 1]}") ;;
        --state-dir=*) args=("${COMP_WORDS[i]}") ;;
        esac
    done
    command apollo list --ids --all "${args[@]}" 2>/dev/null
}

# _apollo_files completes folders and the files whose names end in one of
# the given suffixes.
_apollo_files() {
    local IFS=$'\n' suffix
    COMPREPLY=($(compgen -d -- "$cur"))
    for suffix in "$@"; do
        COMPREPLY+=($(compgen -f -X "!*$suffix" -- "$cur"))
    done
    compopt -o filenames 2>/dev/null
}

_apollo_words() {
    local IFS=$' \t\n'
    COMPREPLY=($(compgen -W "$1" -- "$cur"))
}
`

// bashCompletion is the bash script: the shared functions, then _apollo,
// which completes the command name, then for each command a flag's value
// (after a flag that takes one), a flag (after "-") or its positional
// argument.
func bashCompletion(cmds []Command) string {
	var b strings.Builder
	b.WriteString(bashHeader)
	b.WriteString("\n_apollo() {\n")
	b.WriteString("    local cur=\"${COMP_WORDS[COMP_CWORD]}\" prev=\"${COMP_WORDS[COMP_CWORD-1]}\"\n")
	b.WriteString("    COMPREPLY=()\n")
	fmt.Fprintf(&b, "    if ((COMP_CWORD == 1)); then\n        _apollo_words %q\n        return\n    fi\n", commandNames(cmds)+" help")
	b.WriteString("    local cmd=\"${COMP_WORDS[1]}\" i npos=0 valued=\"\"\n")
	writeBashValued(&b, cmds)
	b.WriteString(bashCountArgs)
	b.WriteString("    case \"$cmd\" in\n")
	for _, c := range cmds {
		writeBashCommand(&b, c, cmds)
	}
	b.WriteString("    help)\n")
	fmt.Fprintf(&b, "        ((npos == 0)) && _apollo_words %q\n", commandNames(cmds))
	b.WriteString("        ;;\n")
	b.WriteString("    esac\n")
	b.WriteString("    return 0\n")
	b.WriteString("}\n\ncomplete -F _apollo apollo\n")
	return b.String()
}

// writeBashValued writes a case that sets $valued to the command's flags
// that take a value, which bashCountArgs skips with their values.
func writeBashValued(b *strings.Builder, cmds []Command) {
	b.WriteString("    case \"$cmd\" in\n")
	for _, c := range cmds {
		var valued []string
		for _, f := range c.Flags {
			if f.Value != ValueNone {
				valued = append(valued, "--"+f.Name)
				if f.Short != "" {
					valued = append(valued, "-"+f.Short)
				}
			}
		}
		fmt.Fprintf(b, "    %s) valued=%q ;;\n", c.Name, " "+strings.Join(valued, " ")+" ")
	}
	b.WriteString("    esac\n")
}

// bashCountArgs sets $npos to the number of positional arguments before
// the cursor.
const bashCountArgs = `    # Count the arguments before the cursor, skipping flags and their values.
    for ((i = 2; i < COMP_CWORD; i++)); do
        case "${COMP_WORDS[i]}" in
        --) ;;
        -*=*) ;;
        -*) [[ $valued == *" ${COMP_WORDS[i]} "* ]] && ((i++)) ;;
        *) ((npos++)) ;;
        esac
    done
`

// writeBashCommand writes the case of command c: its flags' values, its
// flags, then its positional argument.
func writeBashCommand(b *strings.Builder, c Command, cmds []Command) {
	fmt.Fprintf(b, "    %s)\n", c.Name)
	b.WriteString("        case \"$prev\" in\n")
	for _, f := range c.Flags {
		if f.Value == ValueNone {
			continue
		}
		pat := "--" + f.Name
		if f.Short != "" {
			pat += "|-" + f.Short
		}
		fmt.Fprintf(b, "        %s) %s ;;\n", pat, bashValueAction(f))
	}
	b.WriteString("        esac\n")
	fmt.Fprintf(b, "        if [[ $cur == -* ]]; then\n            _apollo_words %q\n            return\n        fi\n", flagWords(c))
	writeBashArgs(b, c, cmds)
	b.WriteString("        ;;\n")
}

// bashValueAction completes the value of flag f: its fixed choices, a
// folder, a task id, or nothing.
func bashValueAction(f Flag) string {
	switch {
	case len(f.Values) > 0:
		return fmt.Sprintf("_apollo_words %q; return", strings.Join(f.Values, " "))
	case f.Value == ValueDir:
		return "local IFS=$'\\n'; COMPREPLY=($(compgen -d -- \"$cur\")); compopt -o filenames 2>/dev/null; return"
	case f.Value == ValueTask:
		return "_apollo_words \"$(_apollo_task_ids)\"; return"
	}
	return "return"
}

// writeBashArgs completes c's first positional argument.
func writeBashArgs(b *strings.Builder, c Command, cmds []Command) {
	switch c.Args {
	case ArgPipeline:
		b.WriteString("        ((npos == 0)) && _apollo_files .yaml .yml\n")
	case ArgLua:
		b.WriteString("        ((npos == 0)) && _apollo_files .lua\n")
	case ArgTask:
		b.WriteString("        if ((npos == 0)); then\n")
		b.WriteString("            if [[ $cur == */* || $cur == .* ]]; then\n")
		b.WriteString("                _apollo_files .jsonl .jsonl.gz\n")
		b.WriteString("            else\n")
		b.WriteString("                _apollo_words \"$(_apollo_task_ids)\"\n")
		b.WriteString("            fi\n")
		b.WriteString("        fi\n")
	case ArgWords:
		fmt.Fprintf(b, "        ((npos == 0)) && _apollo_words %q\n", strings.Join(c.Words, " "))
	case ArgCommand:
		fmt.Fprintf(b, "        ((npos == 0)) && _apollo_words %q\n", commandNames(cmds))
	}
}

func zshCompletion(cmds []Command) string {
	var b strings.Builder
	b.WriteString(`#compdef apollo
# zsh completion for apollo.
# Load it in the current shell:  source <(apollo completion zsh)
# or for every shell: apollo completion zsh > "${fpath[1]}/_apollo" (then restart zsh)

_apollo_task_ids() {
  local -a ids
  ids=(${(f)"$(apollo list --ids --all 2>/dev/null)"})
  _describe -t tasks 'task id' ids
}

_apollo_task_or_log() {
  _alternative 'tasks:task id:_apollo_task_ids' 'files:log file:_path_files -g "*.jsonl(|.gz)(-.)"'
}

_apollo() {
  local -a commands
  commands=(
`)
	for _, c := range cmds {
		fmt.Fprintf(&b, "    '%s:%s'\n", c.Name, zshQuote(shortUsage(c.Summary)))
	}
	b.WriteString("    'help:show the help of a command'\n")
	b.WriteString("  )\n")
	b.WriteString("  if (( CURRENT == 2 )); then\n    _describe -t commands 'apollo command' commands\n    return\n  fi\n")
	b.WriteString("  local cmd=$words[2]\n  shift words\n  (( CURRENT-- ))\n  case $cmd in\n")
	for _, c := range cmds {
		fmt.Fprintf(&b, "  %s)\n    _arguments -s", c.Name)
		for _, f := range c.Flags {
			usage := zshQuote(shortUsage(f.Usage))
			names := "--" + f.Name
			if f.Short != "" {
				names = fmt.Sprintf("(-%s --%s)'{-%s,--%s}'", f.Short, f.Name, f.Short, f.Name)
			}
			if f.Value == ValueNone {
				fmt.Fprintf(&b, " \\\n      '%s[%s]'", names, usage)
				continue
			}
			action := " "
			switch {
			case len(f.Values) > 0:
				action = "(" + strings.Join(f.Values, " ") + ")"
			case f.Value == ValueDir:
				action = "_files -/"
			case f.Value == ValueTask:
				action = "_apollo_task_ids"
			}
			repeat := ""
			if f.Name == "var" {
				repeat = "*"
			}
			fmt.Fprintf(&b, " \\\n      '%s%s=[%s]:%s:%s'", repeat, names, usage, f.Name, action)
		}
		switch c.Args {
		case ArgPipeline:
			b.WriteString(" \\\n      '1:pipeline file:_files -g \"*.(yaml|yml)(-.)\"'")
		case ArgLua:
			b.WriteString(" \\\n      '1:Lua file:_files -g \"*.lua(-.)\"' \\\n      '*::script argument: '")
		case ArgTask:
			b.WriteString(" \\\n      '1:task id or log:_apollo_task_or_log'")
			if c.Name == "logs" {
				b.WriteString(" \\\n      '2:step id: '")
			}
		case ArgWords:
			fmt.Fprintf(&b, " \\\n      '1:argument:(%s)'", strings.Join(c.Words, " "))
		case ArgCommand:
			fmt.Fprintf(&b, " \\\n      '1:command:(%s)'", commandNames(cmds))
		}
		b.WriteString("\n    ;;\n")
	}
	fmt.Fprintf(&b, "  help)\n    _arguments '1:command:(%s)'\n    ;;\n", commandNames(cmds))
	b.WriteString("  esac\n}\n\nif [[ $zsh_eval_context[-1] == loadautofunc ]]; then\n  _apollo \"$@\"\nelse\n  compdef _apollo apollo\nfi\n")
	return b.String()
}

func fishCompletion(cmds []Command) string {
	var b strings.Builder
	b.WriteString(`# fish completion for apollo.
# Load it in the current shell:  apollo completion fish | source
# or for every shell:             apollo completion fish > ~/.config/fish/completions/apollo.fish

function __apollo_task_ids
    apollo list --ids --all 2>/dev/null
end

complete -c apollo -f
`)
	names := commandNames(cmds) + " help"
	for _, c := range cmds {
		fmt.Fprintf(&b, "complete -c apollo -n 'not __fish_seen_subcommand_from %s' -a %s -d '%s'\n", names, c.Name, fishQuote(shortUsage(c.Summary)))
	}
	fmt.Fprintf(&b, "complete -c apollo -n 'not __fish_seen_subcommand_from %s' -a help -d 'show the help of a command'\n", names)
	for _, c := range cmds {
		cond := fmt.Sprintf("-n '__fish_seen_subcommand_from %s'", c.Name)
		for _, f := range c.Flags {
			line := fmt.Sprintf("complete -c apollo %s -l %s", cond, f.Name)
			if f.Short != "" {
				line += " -s " + f.Short
			}
			switch {
			case f.Value == ValueNone:
			case len(f.Values) > 0:
				line += fmt.Sprintf(" -x -a '%s'", strings.Join(f.Values, " "))
			case f.Value == ValueDir:
				line += " -x -a '(__fish_complete_directories)'"
			case f.Value == ValueTask:
				line += " -x -a '(__apollo_task_ids)'"
			default:
				line += " -x"
			}
			line += fmt.Sprintf(" -d '%s'", fishQuote(shortUsage(f.Usage)))
			b.WriteString(line + "\n")
		}
		switch c.Args {
		case ArgPipeline:
			fmt.Fprintf(&b, "complete -c apollo %s -k -a '(__fish_complete_suffix .yaml; __fish_complete_suffix .yml)'\n", cond)
		case ArgLua:
			fmt.Fprintf(&b, "complete -c apollo %s -k -a '(__fish_complete_suffix .lua)'\n", cond)
		case ArgTask:
			fmt.Fprintf(&b, "complete -c apollo %s -a '(__apollo_task_ids)' -d 'task id'\n", cond)
		case ArgWords:
			fmt.Fprintf(&b, "complete -c apollo %s -a '%s'\n", cond, strings.Join(c.Words, " "))
		case ArgCommand:
			fmt.Fprintf(&b, "complete -c apollo %s -a '%s'\n", cond, commandNames(cmds))
		}
	}
	fmt.Fprintf(&b, "complete -c apollo -n '__fish_seen_subcommand_from help' -a '%s'\n", commandNames(cmds))
	return b.String()
}
