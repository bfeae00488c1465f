// Package testbin builds the real apollo binary for the tests that run it
// as a user does (engine/e2e, engine/nemesis), once per test process.
package testbin
