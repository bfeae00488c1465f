// Package e2e holds apollo's end-to-end tests: each builds the real binary
// once (helpers_test.go) and drives it on real pipelines in temporary
// folders — crash torture and named crash points, concurrent writers, the
// cache torture, language torture, replacement under kill, the memory
// bound, hostile pipelines, command lines and Lua scripts, and the peers
// benchmark. They see apollo only as a user does: its exit codes, its
// output, and the files it leaves. The package itself holds no code.
package e2e
