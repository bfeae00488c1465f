-- want: value: cannot encode function
return print
