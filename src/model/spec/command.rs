//! Command lines: a POSIX-like word splitter (no shell is ever run) and its
//! inverse, [`quote_argv`].
//!
//! Users paste shell command lines, so a string command is split the way
//! `sh` would split it. Because the job is then exec'd directly, anything a
//! shell would *interpret* rather than merely split (pipes, redirections,
//! `$VAR`, `~`, comments, leading `VAR=value`) is refused instead of being
//! silently passed through as a literal, which would not do what the user
//! meant.

use super::{RawCommand, SpecError};

/// Longest single argument accepted; generous for paths and flags, small
/// enough that a spec stays reviewable.
const MAX_ARG_BYTES: usize = 4096;

/// Why a command line could not be split, worded for the user who typed it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SplitError {
    /// A quote was opened and never closed.
    #[error("command has an opening {0} quote that is never closed")]
    UnclosedQuote(char),
    /// A backslash with nothing after it escapes nothing.
    #[error("command ends with a backslash that escapes nothing")]
    TrailingBackslash,
    /// Pipes, redirections, `;`, `&` and subshells need a shell.
    #[error(
        "command contains an unquoted `{0}`, but gpuq runs the command without a shell; \
         quote it to pass it literally, or use [\"sh\", \"-c\", \"...\"] as the command"
    )]
    ShellOperator(char),
    /// `$` and backticks would be expanded by a shell, even inside double quotes.
    #[error(
        "command contains `{0}`, which a shell would expand, but gpuq runs the command \
         without a shell; put it in single quotes to pass it literally, or use \
         [\"sh\", \"-c\", \"...\"] as the command"
    )]
    Expansion(char),
    /// `#` at the start of a word begins a comment in a shell.
    #[error(
        "command contains a word starting with `#`, which a shell would treat as a comment; \
         quote it to pass it literally"
    )]
    Comment,
    /// `NAME=value` before the program sets a variable in a shell.
    #[error(
        "command starts with the variable assignment `{0}=...`, but gpuq runs the command \
         without a shell; set variables in env instead"
    )]
    Assignment(String),
}

fn is_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Splits a command line into argv the way a POSIX shell splits words:
/// blanks (space, tab, newline, CR) separate words; `'...'` is literal;
/// `"..."` is literal except `\` before `$`, `` ` ``, `"`, `\` or newline;
/// an unquoted `\` escapes the next character; `\` + newline joins lines.
/// Adjacent quoted and unquoted parts form one word, and `''` is an empty
/// word. Constructs a shell would interpret are refused (see [`SplitError`]).
pub fn split_command(line: &str) -> Result<Vec<String>, SplitError> {
    let mut words = Vec::new();
    let mut word = String::new();
    // A word exists once anything (even `''`) was seen, so empty words survive.
    let mut in_word = false;
    // Nothing in the current word was quoted or escaped (for `NAME=`).
    let mut plain = true;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' | '\n' | '\r' => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                    plain = true;
                }
            }
            // Single quotes keep everything literally; double quotes take `\` escapes and refuse
            // expansions.
            q @ ('\'' | '"') => {
                in_word = true;
                plain = false;
                let double = q == '"';
                loop {
                    match chars.next() {
                        None => return Err(SplitError::UnclosedQuote(q)),
                        Some(ch) if ch == q => break,
                        Some('\\') if double => match chars.next() {
                            None => return Err(SplitError::UnclosedQuote(q)),
                            Some('\n') => {}
                            Some(e @ ('$' | '`' | '"' | '\\')) => word.push(e),
                            Some(other) => {
                                word.push('\\');
                                word.push(other);
                            }
                        },
                        Some(e @ ('$' | '`')) if double => return Err(SplitError::Expansion(e)),
                        Some(ch) => word.push(ch),
                    }
                }
            }
            '\\' => match chars.next() {
                None => return Err(SplitError::TrailingBackslash),
                // Line continuation: removed, and does not start a word.
                Some('\n') => {}
                Some(escaped) => {
                    in_word = true;
                    plain = false;
                    word.push(escaped);
                }
            },
            '|' | '&' | ';' | '<' | '>' | '(' | ')' => return Err(SplitError::ShellOperator(c)),
            '$' | '`' => return Err(SplitError::Expansion(c)),
            '~' if !in_word => return Err(SplitError::Expansion(c)),
            '#' if !in_word => return Err(SplitError::Comment),
            '=' if words.is_empty() && plain && is_name(&word) => {
                return Err(SplitError::Assignment(word));
            }
            other => {
                in_word = true;
                word.push(other);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

/// Characters that never need quoting; `=` is safe except in the first word,
/// where it would read as a variable assignment.
fn is_safe(c: char, first: bool) -> bool {
    c.is_ascii_alphanumeric() || "_@%+:,./-".contains(c) || (c == '=' && !first)
}

/// Renders argv as one command line that [`split_command`] (and `sh`) turn
/// back into exactly the same argv, so the UI can show and edit a command
/// as text without changing its meaning.
pub fn quote_argv<S: AsRef<str>>(argv: &[S]) -> String {
    let mut out = String::new();
    for (i, arg) in argv.iter().enumerate() {
        let arg = arg.as_ref();
        if i > 0 {
            out.push(' ');
        }
        if !arg.is_empty() && arg.chars().all(|c| is_safe(c, i == 0)) {
            out.push_str(arg);
        } else {
            out.push('\'');
            out.push_str(&arg.replace('\'', r"'\''"));
            out.push('\'');
        }
    }
    out
}

/// Turns either command form into a checked argv.
pub(super) fn parse_command(raw: RawCommand, max_args: usize) -> Result<Vec<String>, SpecError> {
    let (argv, from_array) = match raw {
        RawCommand::Argv(argv) => (argv, true),
        RawCommand::Line(line) => (
            split_command(&line).map_err(|e| SpecError::new("command", e.to_string()))?,
            false,
        ),
    };
    if argv.is_empty() {
        return Err(SpecError::new(
            "command",
            "command must not be empty: give the program to run and its arguments",
        ));
    }
    SpecError::at_most("command", "arguments", argv.len(), max_args)?;
    // Point at the array element when the user wrote an array.
    let field = |i: usize| {
        if from_array {
            format!("command[{i}]")
        } else {
            "command".to_owned()
        }
    };
    for (i, arg) in argv.iter().enumerate() {
        if arg.len() > MAX_ARG_BYTES {
            return Err(SpecError::new(
                field(i),
                format!("command argument {i} is longer than {MAX_ARG_BYTES} bytes"),
            ));
        }
        if arg.contains('\0') {
            return Err(SpecError::new(
                field(i),
                format!("command argument {i} contains a NUL character"),
            ));
        }
    }
    if argv[0].is_empty() {
        return Err(SpecError::new(
            field(0),
            "the program to run (the first word of command) must not be empty",
        ));
    }
    Ok(argv)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(line: &str, expected: &[&str]) {
        assert_eq!(
            split_command(line),
            Ok(expected.iter().map(|s| s.to_string()).collect()),
            "line: {line:?}"
        );
    }

    #[test]
    fn split_table() {
        let cases: &[(&str, &[&str])] = &[
            ("", &[]),
            ("   \t\n ", &[]),
            ("python train.py", &["python", "train.py"]),
            ("  a   b  ", &["a", "b"]),
            ("a\tb\nc\r\nd", &["a", "b", "c", "d"]),
            ("'a b'", &["a b"]),
            ("\"a b\"", &["a b"]),
            ("''", &[""]),
            ("a '' b", &["a", "", "b"]),
            ("\"\"", &[""]),
            ("a\"b\"'c'", &["abc"]),
            ("'it'\\''s'", &["it's"]),
            ("'a\\b'", &["a\\b"]),
            ("'$HOME `x` \"q\"'", &["$HOME `x` \"q\""]),
            ("\"a\\\"b\"", &["a\"b"]),
            ("\"a\\\\b\"", &["a\\b"]),
            ("\"a\\$b\"", &["a$b"]),
            ("\"a\\nb\"", &["a\\nb"]),
            ("\"line\\\nnext\"", &["linenext"]),
            ("\"multi\nline\"", &["multi\nline"]),
            ("a\\ b", &["a b"]),
            ("\\'", &["'"]),
            ("\\\"x", &["\"x"]),
            ("a\\\\b", &["a\\b"]),
            ("a \\\n b", &["a", "b"]),
            ("a\\\nb", &["ab"]),
            ("\\|", &["|"]),
            ("'a|b;c>d'", &["a|b;c>d"]),
            ("x#y", &["x#y"]),
            ("'#x'", &["#x"]),
            ("x a=b", &["x", "a=b"]),
            ("prog A=b", &["prog", "A=b"]),
            ("'A'=b", &["A=b"]),
            ("A\\=b", &["A=b"]),
            ("=x", &["=x"]),
            ("1A=x", &["1A=x"]),
            ("--lr=0.1 x", &["--lr=0.1", "x"]),
            ("a~b", &["a~b"]),
            ("'~'", &["~"]),
            ("*.txt [ab]", &["*.txt", "[ab]"]),
            ("héllo wörld", &["héllo", "wörld"]),
        ];
        for (line, expected) in cases {
            ok(line, expected);
        }
    }

    #[test]
    fn split_refusals() {
        use SplitError::*;
        let cases: &[(&str, SplitError)] = &[
            ("'abc", UnclosedQuote('\'')),
            ("a 'b c", UnclosedQuote('\'')),
            ("\"abc", UnclosedQuote('"')),
            ("\"abc\\\"", UnclosedQuote('"')),
            ("\"a\\", UnclosedQuote('"')),
            ("a\"b'c\"'", UnclosedQuote('\'')),
            ("abc\\", TrailingBackslash),
            ("a | b", ShellOperator('|')),
            ("a>out", ShellOperator('>')),
            ("a < in", ShellOperator('<')),
            ("a; b", ShellOperator(';')),
            ("a && b", ShellOperator('&')),
            ("(a)", ShellOperator('(')),
            ("echo $HOME", Expansion('$')),
            ("echo \"$HOME\"", Expansion('$')),
            ("echo `id`", Expansion('`')),
            ("echo \"`id`\"", Expansion('`')),
            ("cat ~/x", Expansion('~')),
            ("a # comment", Comment),
            ("#x", Comment),
            ("FOO=1 python x.py", Assignment("FOO".into())),
            ("_x=", Assignment("_x".into())),
            ("a=b", Assignment("a".into())),
        ];
        for (line, expected) in cases {
            assert_eq!(
                split_command(line).as_ref(),
                Err(expected),
                "line: {line:?}"
            );
        }
    }

    #[test]
    fn refusal_messages_are_plain_words() {
        let msg = split_command("a 'b").map_err(|e| e.to_string());
        assert_eq!(
            msg,
            Err("command has an opening ' quote that is never closed".into())
        );
        let msg = split_command("a | b").map_err(|e| e.to_string());
        assert!(msg.is_err_and(|m| m.contains("without a shell") && m.contains("`|`")));
    }

    #[test]
    fn quote_argv_examples() {
        assert_eq!(quote_argv::<&str>(&[]), "");
        assert_eq!(quote_argv(&["python", "train.py"]), "python train.py");
        assert_eq!(quote_argv(&["a b", ""]), "'a b' ''");
        assert_eq!(quote_argv(&["it's"]), r"'it'\''s'");
        assert_eq!(quote_argv(&["A=b", "A=b"]), "'A=b' A=b");
        assert_eq!(quote_argv(&["x", "#c", "~", "$v"]), "x '#c' '~' '$v'");
        for argv in [vec!["A=b", "--x=1"], vec!["", "'", "\"", "\\", "\n", "a b"]] {
            let line = quote_argv(&argv);
            assert_eq!(
                split_command(&line),
                Ok(argv.iter().map(|s| s.to_string()).collect())
            );
        }
    }

    fn argv(words: &[&str]) -> RawCommand {
        RawCommand::Argv(words.iter().map(|s| s.to_string()).collect())
    }

    fn err(raw: RawCommand, max: usize) -> SpecError {
        match parse_command(raw, max) {
            Err(e) => e,
            Ok(v) => panic!("accepted {v:?}"),
        }
    }

    #[test]
    fn parse_command_accepts_both_forms() {
        let line = RawCommand::Line("python -c 'print(1)'".into());
        let expected = vec!["python", "-c", "print(1)"];
        assert_eq!(
            parse_command(line, 3),
            Ok(expected.iter().map(|s| s.to_string()).collect())
        );
        assert_eq!(parse_command(argv(&expected), 3).map(|v| v.len()), Ok(3));
        let longest = "x".repeat(MAX_ARG_BYTES);
        assert!(parse_command(argv(&["p", &longest]), 3).is_ok());
    }

    #[test]
    fn parse_command_refusals() {
        let e = err(argv(&[]), 4);
        assert_eq!(e.field, "command");
        assert!(e.message.contains("must not be empty"));
        let e = err(RawCommand::Line("  \n".into()), 4);
        assert_eq!(e.field, "command");
        assert!(e.message.contains("must not be empty"));
        let e = err(RawCommand::Line("echo 'oops".into()), 4);
        assert_eq!(e.field, "command");
        assert!(e.message.contains("never closed"));
        let e = err(argv(&["a", "b", "c"]), 2);
        assert_eq!(e.field, "command");
        assert!(e.message.contains("at most 2"));
        let long = "x".repeat(MAX_ARG_BYTES + 1);
        let e = err(argv(&["p", &long]), 4);
        assert_eq!(e.field, "command[1]");
        assert!(e.message.contains("longer than 4096 bytes"));
        let e = err(RawCommand::Line(format!("p {long}")), 4);
        assert_eq!(e.field, "command");
        let e = err(argv(&["p", "a\0b"]), 4);
        assert_eq!(e.field, "command[1]");
        assert!(e.message.contains("NUL"));
        let e = err(argv(&["", "x"]), 4);
        assert_eq!(e.field, "command[0]");
        assert!(e.message.contains("program"));
        let e = err(RawCommand::Line("'' x".into()), 4);
        assert_eq!(e.field, "command");
    }
}
