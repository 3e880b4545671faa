// Package cdctest holds the test fixtures that need cdc: a move's
// publication and slot on a test server, as the data-plane packages'
// tests (backfill, verify) make them. They cannot live in pgtest, which
// cdc's own tests import; this package imports cdc and pgtest, and only
// tests import it.
package cdctest
