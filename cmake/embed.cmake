# Turns a text file into a C string constant: cmake -DIN=file -DOUT=header -DNAME=symbol -P embed.cmake
file(READ "${IN}" hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," body "${hex}")
file(WRITE "${OUT}" "/* generated from ${IN} by cmake/embed.cmake */\nstatic const char ${NAME}[] = {${body}0};\n")
