package luart

import (
	"strconv"

	"github.com/yuin/gopher-lua/ast"
)

// gopher-lua v1.1.2 compiles two kinds of assignment to a local variable wrongly, and the
// script runs on with a wrong value (docs/spec.md §6.11):
//
//   - a, b = a + 1, a + b: an expression right of the first reads a target on its left
//     after that target was assigned (b gets the new a; gopher-lua issue #440);
//   - x = x and f() and g(): an and/or chain assigned to a local comes out true where it
//     is false (issue #490).
//
// The same statements are compiled correctly when their values go first into fresh locals
// (local t1, t2 = a + 1, a + b), so avoidMiscompiles rewrites each such assignment, before it
// is compiled, into do local t1, t2 = <the values>; a, b = t1, t2 end: the same values, read
// before anything is assigned, as Lua defines it. Statements of no such shape are left alone.

// avoidMiscompiles rewrites, in stmts and every block and function inside them, the
// assignments that gopher-lua would compile wrongly, and returns stmts.
func avoidMiscompiles(stmts []ast.Stmt) []ast.Stmt {
	for i, st := range stmts {
		stmts[i] = avoidInStmt(st)
	}
	return stmts
}

func avoidInStmt(st ast.Stmt) ast.Stmt {
	switch s := st.(type) {
	case *ast.AssignStmt:
		avoidInExprs(s.Lhs...)
		avoidInExprs(s.Rhs...)
		if miscompiled(s) {
			return viaTemporaries(s)
		}
	case *ast.LocalAssignStmt:
		avoidInExprs(s.Exprs...)
	case *ast.FuncCallStmt:
		avoidInExprs(s.Expr)
	case *ast.DoBlockStmt:
		s.Stmts = avoidMiscompiles(s.Stmts)
	case *ast.WhileStmt:
		avoidInExprs(s.Condition)
		s.Stmts = avoidMiscompiles(s.Stmts)
	case *ast.RepeatStmt:
		avoidInExprs(s.Condition)
		s.Stmts = avoidMiscompiles(s.Stmts)
	case *ast.IfStmt:
		avoidInExprs(s.Condition)
		s.Then = avoidMiscompiles(s.Then)
		s.Else = avoidMiscompiles(s.Else)
	case *ast.NumberForStmt:
		avoidInExprs(s.Init, s.Limit, s.Step)
		s.Stmts = avoidMiscompiles(s.Stmts)
	case *ast.GenericForStmt:
		avoidInExprs(s.Exprs...)
		s.Stmts = avoidMiscompiles(s.Stmts)
	case *ast.FuncDefStmt:
		avoidInExprs(s.Func)
	case *ast.ReturnStmt:
		avoidInExprs(s.Exprs...)
	}
	return st
}

// avoidInExprs rewrites the function bodies inside es.
func avoidInExprs(es ...ast.Expr) {
	for _, e := range es {
		if f, ok := e.(*ast.FunctionExpr); ok {
			f.Stmts = avoidMiscompiles(f.Stmts)
			continue
		}
		avoidInExprs(subExprs(e)...)
	}
}

// subExprs are the expressions e is made of, a function's body aside;
// none for a leaf or a function.
func subExprs(e ast.Expr) []ast.Expr {
	switch e := e.(type) {
	case *ast.AttrGetExpr:
		return []ast.Expr{e.Object, e.Key}
	case *ast.TableExpr:
		var es []ast.Expr
		for _, f := range e.Fields {
			es = append(es, f.Key, f.Value)
		}
		return es
	case *ast.FuncCallExpr:
		return append([]ast.Expr{e.Func, e.Receiver}, e.Args...)
	case *ast.LogicalOpExpr:
		return []ast.Expr{e.Lhs, e.Rhs}
	case *ast.RelationalOpExpr:
		return []ast.Expr{e.Lhs, e.Rhs}
	case *ast.StringConcatOpExpr:
		return []ast.Expr{e.Lhs, e.Rhs}
	case *ast.ArithmeticOpExpr:
		return []ast.Expr{e.Lhs, e.Rhs}
	case *ast.UnaryMinusOpExpr:
		return []ast.Expr{e.Expr}
	case *ast.UnaryNotOpExpr:
		return []ast.Expr{e.Expr}
	case *ast.UnaryLenOpExpr:
		return []ast.Expr{e.Expr}
	}
	return nil
}

// miscompiled reports whether s has one of the shapes gopher-lua compiles wrongly when its
// targets are locals: a value right of the first that reads a variable assigned on its left,
// or a single variable given an and/or expression. (The rewrite is harmless for globals.)
func miscompiled(s *ast.AssignStmt) bool {
	if len(s.Lhs) == 1 {
		_, ident := s.Lhs[0].(*ast.IdentExpr)
		_, logical := s.Rhs[0].(*ast.LogicalOpExpr)
		return ident && logical && len(s.Rhs) == 1
	}
	for i, target := range s.Lhs {
		id, ok := target.(*ast.IdentExpr)
		if !ok {
			continue
		}
		for _, later := range s.Rhs[min(i+1, len(s.Rhs)):] {
			if reads(later, id.Value) {
				return true
			}
		}
	}
	return false
}

// reads reports whether e reads the variable name, outside the functions it defines (a
// function reads its upvalue when it is called, not where it is made).
func reads(e ast.Expr, name string) bool {
	if id, ok := e.(*ast.IdentExpr); ok {
		return id.Value == name
	}
	for _, sub := range subExprs(e) {
		if reads(sub, name) {
			return true
		}
	}
	return false
}

// viaTemporaries is s as do local t1, ... = <its values>; <its targets> = t1, ... end, on
// s's lines. The temporaries' names cannot be written in Lua, so they shadow nothing.
func viaTemporaries(s *ast.AssignStmt) ast.Stmt {
	names := make([]string, len(s.Lhs))
	temps := make([]ast.Expr, len(s.Lhs))
	for i := range names {
		names[i] = "(apollo value " + strconv.Itoa(i+1) + ")"
		id := &ast.IdentExpr{Value: names[i]}
		onLines(id, s)
		temps[i] = id
	}
	local := &ast.LocalAssignStmt{Names: names, Exprs: s.Rhs}
	assign := &ast.AssignStmt{Lhs: s.Lhs, Rhs: temps}
	block := &ast.DoBlockStmt{Stmts: []ast.Stmt{local, assign}}
	onLines(local, s)
	onLines(assign, s)
	onLines(block, s)
	return block
}

func onLines(n ast.PositionHolder, like ast.PositionHolder) {
	n.SetLine(like.Line())
	n.SetLastLine(like.LastLine())
}
