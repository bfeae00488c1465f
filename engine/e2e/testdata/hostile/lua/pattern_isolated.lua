-- want: timed out after 300ms
-- isolation: process
return (("a"):rep(30) .. "b"):find(("a*"):rep(30) .. "c")
