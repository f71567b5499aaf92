uno
dos
tres
